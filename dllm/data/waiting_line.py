"""Procedural generator for the ten ParallelBench waiting-line tasks (independent code).

Follows the published procedure: list length L, names drawn with ``rng.sample`` and redrawn
until first names and last names are each distinct, then the task's edit. Indices are 0-based.
Output records have the shape of the official JSONL files.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

TASKS = ("copy", "reverse", "sort", "shuffle", "insert_index", "insert_random",
         "remove_index", "remove_random", "replace_index", "replace_random")


def list_to_str(items: list[str]) -> str:
    """``["A B", "C D"]``: JSON-style quotes, comma + space."""
    return "[" + ", ".join(f'"{x}"' for x in items) + "]"


def _draw_list(rng: random.Random, names: list[str], length: int) -> list[str]:
    while True:
        items = rng.sample(names, length)
        firsts = {n.split(" ")[0] for n in items}
        lasts = {n.split(" ")[1] for n in items}
        if len(firsts) == length and len(lasts) == length:
            return items


def _new_name(rng: random.Random, names: list[str], items: list[str]) -> str:
    taken = set(items)
    return rng.choice([n for n in names if n not in taken])


def generate_waiting_line(task: str, rng: random.Random, names: list[str], length: int) -> dict:
    """One sample of ``task`` with a list of ``length`` names."""
    if task not in TASKS:
        raise ValueError(f"unknown waiting-line task {task!r}; known: {TASKS}")
    items = _draw_list(rng, names, length)
    context = list_to_str(items)
    inp: dict = {"context": context}
    if task == "copy":
        answer: str | dict = context
    elif task == "reverse":
        answer = list_to_str(items[::-1])
    elif task == "sort":
        answer = list_to_str(sorted(items))  # full-name order, as the official labels
    elif task == "shuffle":
        shuffled = list(items)
        while shuffled == items:
            rng.shuffle(shuffled)
        answer = {"input": items, "example": list_to_str(shuffled)}
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
        if mode == "index":
            inp["index"] = index
            answer = list_to_str(out)
        else:
            answer = {"input": items, "example": list_to_str(out)}
            if word is not None:
                answer["word"] = word
    return {"input": inp, "answer": answer, "metadata": {"length": length}}


def official_test_contexts(data_dir: Path) -> set[str]:
    """Every list (test input and one-shot example) in the official waiting-line and Latin
    square files, so training data can exclude them."""
    seen: set[str] = set()
    for path in sorted(Path(data_dir).glob("*/*.jsonl")):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            for inp in [rec["input"]] + [ex["input"] for ex in rec["input"].get("icl_examples", [])]:
                for key in ("context", "symbols"):
                    if key in inp:
                        seen.add(inp[key])
    return seen
