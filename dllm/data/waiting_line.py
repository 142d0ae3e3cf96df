"""Procedural generator for the ten ParallelBench waiting-line tasks (independent code).

Follows the published procedure (reference §1.5): a list of L names drawn with ``rng.sample``
and redrawn until first names and last names are each distinct, then the task's edit, all from
one ``random.Random`` in a fixed call order. With the official seeds, ``generate_split``
reproduces the shipped test files record for record; training passes its own seeds and drops
lists that ``official_test_contexts`` returns. Indices are 0-based, as in the v0 data.
"""
from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

TASKS = ("copy", "reverse", "sort", "shuffle", "insert_index", "insert_random",
         "remove_index", "remove_random", "replace_index", "replace_random")

# Tasks whose official records carry an infill template (``output_format``); the others don't.
_WITH_OUTPUT_FORMAT = frozenset({"copy", "shuffle", "insert_index", "insert_random",
                                 "replace_index", "replace_random"})


def list_to_str(items: list[str]) -> str:
    """``["A B", "C D"]``: JSON-style double quotes, comma + space, as in the official data."""
    return "[" + ", ".join(f'"{x}"' for x in items) + "]"


def official_seed(task: str) -> int:
    """The seed ParallelBench derived for ``task``: (sha256(key) + 42) mod 65535, where the key
    of the edit tasks carries a ``_list`` suffix (e.g. ``insert_index_list``)."""
    key = task if task in ("copy", "reverse", "sort", "shuffle") else f"{task}_list"
    return (int(hashlib.sha256(key.encode()).hexdigest(), 16) + 42) % 65535


def _draw_list(rng: random.Random, names: list[str], length: int) -> list[str]:
    """``length`` names whose first names are all distinct and last names are all distinct."""
    while True:
        items = rng.sample(names, length)
        firsts = {n.split(" ", 1)[0] for n in items}
        lasts = {n.split(" ", 1)[1] for n in items}
        if len(firsts) == length and len(lasts) == length:
            return items


def _new_name(rng: random.Random, names: list[str], items: list[str]) -> str:
    """A name from the pool that is not already in the list."""
    taken = set(items)
    return rng.choice([n for n in names if n not in taken])


def generate_waiting_line(task: str, rng: random.Random, names: list[str], length: int) -> dict:
    """One sample of ``task`` over a list of ``length`` names, in the official record shape:
    ``{"input": {"context", "word"?, "index"?}, "answer": str | dict, "output_format"?,
    "metadata": {"length", "index"?, "word"?}}``. Random tasks answer with
    ``{"input": [...], "word"?: ..., "example": "<one valid list>"}``."""
    if task not in TASKS:
        raise ValueError(f"unknown waiting-line task {task!r}; known: {TASKS}")
    items = _draw_list(rng, names, length)
    context = list_to_str(items)
    inp: dict = {"context": context}
    meta: dict = {"length": length}
    if task == "copy":
        out, answer = items, context
    elif task == "reverse":
        out = items[::-1]
        answer = list_to_str(out)
    elif task == "sort":
        out = sorted(items)  # full-name (first-name) order, as the official labels
        answer = list_to_str(out)
    elif task == "shuffle":
        out = list(items)
        while out == items:
            rng.shuffle(out)
        answer = {"input": items, "example": list_to_str(out)}
    else:
        op, mode = task.split("_")
        out = list(items)
        word = _new_name(rng, names, items) if op in ("insert", "replace") else None
        index = rng.randint(0, length) if op == "insert" else rng.randint(0, length - 1)
        if op == "insert":
            out.insert(index, word)
        elif op == "remove":
            out.pop(index)
        else:
            out[index] = word
        if word is not None:
            inp["word"] = word
        meta["index"] = index if mode == "index" else None
        if word is not None:
            meta["word"] = word
        if mode == "index":
            inp["index"] = index
            answer = list_to_str(out)
        else:
            answer = {"input": items, **({"word": word} if word is not None else {}),
                      "example": list_to_str(out)}
    record: dict = {"input": inp, "answer": answer}
    if task in _WITH_OUTPUT_FORMAT:
        record["output_format"] = list_to_str(["[MASK]"] * len(out))
    record["metadata"] = meta
    return record


def generate_split(task: str, rng: random.Random, names: list[str], *, min_length: int = 3,
                   max_length: int = 6, per_length: int = 25, one_shot: bool = True) -> list[dict]:
    """A length-balanced set, built as ParallelBench builds its test files.

    Samples stream from ``rng`` (length ``randint(min_length, max_length)`` each) into one
    bucket per length; samples for a full bucket are dropped; the result is the buckets in
    ascending length order. With ``one_shot``, the next ``len(result)`` samples of the same
    stream become ``input.icl_examples[0]`` of each sample in turn.
    """
    buckets: dict[int, list[dict]] = {n: [] for n in range(min_length, max_length + 1)}
    while any(len(b) < per_length for b in buckets.values()):
        length = rng.randint(min_length, max_length)
        sample = generate_waiting_line(task, rng, names, length)
        if len(buckets[length]) < per_length:
            buckets[length].append(sample)
    samples = [s for n in sorted(buckets) for s in buckets[n]]
    if one_shot:
        for sample in samples:
            example = generate_waiting_line(task, rng, names, rng.randint(min_length, max_length))
            sample["input"]["icl_examples"] = [example]
    return samples


def official_test_contexts(data_dir: Path) -> set[str]:
    """Every list shown to a model by the official files, so training data can exclude it.

    Collects ``input.context`` of each test sample and one-shot example in every
    ``waiting_line*/`` folder (the n=15 variant included where present), plus the Latin-square
    ``input.symbols`` strings, which the trainer checks the same way (the two kinds of string
    cannot collide: contexts carry double quotes, symbol lists don't).
    """
    data_dir = Path(data_dir)
    paths = sorted(data_dir.glob("waiting_line*/*.jsonl")) + sorted(data_dir.glob("puzzle/latin_square*.jsonl"))
    seen: set[str] = set()
    for path in paths:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            for inp in [rec["input"]] + [ex["input"] for ex in rec["input"].get("icl_examples", [])]:
                for key in ("context", "symbols"):
                    if key in inp:
                        seen.add(inp[key])
    return seen
