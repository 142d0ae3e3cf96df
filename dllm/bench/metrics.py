"""ParallelBench metrics, reimplemented from their published definitions. All are 0/1.

``score(metric, output, sample)`` dispatches on the metric name of task_config.yaml. Grammar-
based metrics need LanguageTool; without it they return None ("not scored"), never 0.
"""
from __future__ import annotations

import re
from typing import Callable


def parse_list(text: str) -> list[str]:
    """Names in the text after the last ``[`` up to the next ``]``."""
    start = text.rfind("[")
    if start < 0:
        return []
    end = text.find("]", start)
    body = text[start + 1 : end if end >= 0 else len(text)]
    items = [x.strip().strip('"').strip("'").strip() for x in body.split(",")]
    return [x for x in items if x]


def _label_list(label) -> list[str]:
    return parse_list(label if isinstance(label, str) else label["example"])


def list_match_score(output: str, sample: dict) -> float:
    return float(parse_list(output) == _label_list(sample["answer"]))


def list_shuffle_score(output: str, sample: dict) -> float:
    """A permutation of the input that differs from it."""
    original = sample["answer"]["input"]
    out = parse_list(output)
    return float(sorted(out) == sorted(original) and out != original)


def list_random_insert_score(output: str, sample: dict) -> float:
    """The new name is present once and removing it leaves exactly the input."""
    original, word = sample["answer"]["input"], sample["input"]["word"]
    out = parse_list(output)
    if out.count(word) != 1:
        return 0.0
    rest = list(out)
    rest.remove(word)
    return float(rest == original)


def list_random_remove_score(output: str, sample: dict) -> float:
    """One name fewer, order preserved."""
    original = sample["answer"]["input"]
    out = parse_list(output)
    if len(out) != len(original) - 1:
        return 0.0
    return float(any(original[:i] + original[i + 1 :] == out for i in range(len(original))))


def list_random_replace_score(output: str, sample: dict) -> float:
    """Same length; the input with the new name at one index."""
    original, word = sample["answer"]["input"], sample["input"]["word"]
    out = parse_list(output)
    if len(out) != len(original) or word not in out:
        return 0.0
    return float(any(original[:i] + [word] + original[i + 1 :] == out for i in range(len(original))))


def latin_square_score(output: str, sample: dict) -> float:
    """First ``size`` lines whose cells are exactly the symbols form a Latin square."""
    symbols = set(sample["answer"]["symbols"])
    n = len(symbols)
    rows = []
    for line in output.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if set(cells) == symbols and len(cells) == n:
            rows.append(cells)
    rows = rows[:n]
    if len(rows) != n:
        return 0.0
    return float(all(len(set(col)) == n for col in zip(*rows)))


def _grid(text: str) -> list[str]:
    lines = [re.sub(r"[\s,]", "", line) for line in text.strip().splitlines()]
    return [line for line in lines if re.fullmatch(r"\d{4}", line)][:4]


def sudoku_score(output: str, sample: dict) -> float:
    """Exact match of the parsed 4x4 grid against the solution."""
    return float(_grid(output) == _grid(sample["answer"]) and len(_grid(output)) == 4)


def words_inclusion_score(output: str, sample: dict) -> float:
    """Every required word appears in the output (substring check)."""
    return float(bool(output.strip()) and all(w in output for w in sample["answer"]["words"]))


def _grammar_ok(text: str) -> bool | None:
    try:
        import language_tool_python  # optional: needs Java and a LanguageTool server
    except ImportError:
        return None
    tool = language_tool_python.LanguageTool("en-US")
    return bool(text.strip()) and not tool.check(text)


def sentence_to_words_score(output: str, sample: dict) -> float | None:
    """Inclusion AND grammar; None when LanguageTool is not installed."""
    grammar = _grammar_ok(output)
    return None if grammar is None else float(grammar and words_inclusion_score(output, sample) == 1.0)


def grammar_score(output: str, sample: dict) -> float | None:
    grammar = _grammar_ok(output)
    return None if grammar is None else float(grammar)


METRICS: dict[str, Callable[[str, dict], float | None]] = {
    "list_match_score": list_match_score,
    "list_shuffle_score": list_shuffle_score,
    "list_random_insert_score": list_random_insert_score,
    "list_random_remove_score": list_random_remove_score,
    "list_random_replace_score": list_random_replace_score,
    "latin_square_score": latin_square_score,
    "sudoku_score": sudoku_score,
    "sentence_to_words_score": sentence_to_words_score,
    "summary_score": grammar_score,
    "paraphrase_score": grammar_score,
}


def score(metric: str, output: str, sample: dict) -> float | None:
    if metric not in METRICS:
        raise ValueError(f"unknown ParallelBench metric {metric!r}; known: {sorted(METRICS)}")
    return METRICS[metric](output, sample)
