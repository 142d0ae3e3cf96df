"""ParallelBench metrics, reimplemented from their published definitions. All are 0/1.

``score(metric, output, sample)`` dispatches on the ``metric`` name of task_config.yaml and
reads the label from ``sample["answer"]``. Parsing follows the benchmark's lenient
("non-strict") mode, quirks included, so numbers stay comparable with the paper's.

Grammar-based metrics need LanguageTool (``language_tool_python`` plus Java); when it is not
importable they return None ("not scored"), never 0. With it, summary and paraphrase give the
grammar score, which is what the paper reports as Text Writing accuracy.
"""
from __future__ import annotations

import functools
import importlib.util
import re
from typing import Any, Callable

# ---------------------------------------------------------------- lists (Waiting Line)


def parse_list(text: str) -> list[str]:
    """Items of the last bracketed list in ``text``.

    Takes the text after the last ``[`` (all of it if there is none) up to the next ``]``,
    splits on commas, drops blank items and strips double quotes and spaces from each, as the
    benchmark does (single quotes and newlines are kept, so ``['A']`` does not parse to A).
    """
    start = text.rfind("[")
    body = text[start + 1 :] if start >= 0 else text
    end = body.find("]")
    if end >= 0:
        body = body[:end]
    return [item.strip('" ') for item in body.split(",") if item.strip()]


def _label_list(answer: Any) -> list[str]:
    return parse_list(answer if isinstance(answer, str) else answer["example"])


def list_match_score(output: str, sample: dict) -> float:
    """Exact list equality with the label (copy, reverse, sort, the ``_index`` edits)."""
    return float(parse_list(output) == _label_list(sample["answer"]))


def list_shuffle_score(output: str, sample: dict) -> float:
    """A permutation of the input list that differs from it."""
    original = sample["answer"]["input"]
    out = parse_list(output)
    return float(sorted(out) == sorted(original) and out != original)


def list_random_insert_score(output: str, sample: dict) -> float:
    """The new name is present, and removing (one copy of) it leaves exactly the input."""
    answer = sample["answer"]
    out = parse_list(output)
    if answer["word"] not in out:
        return 0.0
    out.remove(answer["word"])
    return float(out == answer["input"])


def list_random_remove_score(output: str, sample: dict) -> float:
    """One name fewer, exactly one distinct name missing, the rest in the input's order."""
    original = list(sample["answer"]["input"])
    out = parse_list(output)
    if len(out) != len(original) - 1:
        return 0.0
    missing = set(original) - set(out)
    if len(missing) != 1:
        return 0.0
    original.remove(missing.pop())
    return float(out == original)


def list_random_replace_score(output: str, sample: dict) -> float:
    """Same length, the new name present, and the input with the new name written at the
    position where it first appears equals the output."""
    answer = sample["answer"]
    out = parse_list(output)
    if len(out) != len(answer["input"]) or answer["word"] not in out:
        return 0.0
    expected = list(answer["input"])
    expected[out.index(answer["word"])] = answer["word"]
    return float(out == expected)


# ---------------------------------------------------------------- puzzles


def latin_square_score(output: str, sample: dict) -> float:
    """Validity, not exact match: keep the non-blank lines whose comma-separated cells (as a
    set) equal the symbol set, take the first ``n``, and require every column to hold all
    symbols too. As in the benchmark, rows and columns are compared as sets."""
    symbols = set(sample["answer"]["symbols"])
    n = len(symbols)
    rows = [[cell.strip() for cell in line.split(",")] for line in output.split("\n") if line.strip()]
    rows = [row for row in rows if set(row) == symbols][:n]
    if len(rows) < n:
        return 0.0
    return float(all(set(col) == symbols for col in zip(*rows)))


def _sudoku_grid(text: str, *, strict: bool) -> list[list[int]] | None:
    """A 4x4 grid from text, or None. Lenient: drop spaces and commas, keep the lines that
    hold exactly 4 digits, require exactly 4 such lines. Strict: exactly 4 lines of 4 digits."""
    if strict:
        lines = [line.strip() for line in text.strip().split("\n") if line.strip()]
        if len(lines) != 4 or not all(re.fullmatch(r"\d{4}", line) for line in lines):
            return None
        return [[int(c) for c in line] for line in lines]
    cleaned = text.strip().replace(" ", "").replace(",", "")
    grid = [[int(d) for d in re.findall(r"\d", line)] for line in cleaned.split("\n") if line.strip()]
    grid = [row for row in grid if len(row) == 4]
    return grid if len(grid) == 4 else None


def sudoku_score(output: str, sample: dict) -> float:
    """Exact match of the parsed grid against the solution (``sample["answer"]``, a string
    of four digit rows)."""
    grid = _sudoku_grid(output, strict=False)
    return float(grid is not None and grid == _sudoku_grid(sample["answer"], strict=True))


# ---------------------------------------------------------------- text writing


def words_inclusion_score(output: str, sample: dict) -> float:
    """Every required word occurs in the output (plain, case-sensitive substring check)."""
    return float(all(word in output for word in sample["answer"]["words"]))


def grammar_available() -> bool:
    """Whether ``language_tool_python`` can be imported (grammar metrics are scored)."""
    return importlib.util.find_spec("language_tool_python") is not None


@functools.cache
def _language_tool() -> Any:
    import language_tool_python  # optional: needs Java and a LanguageTool server jar

    return language_tool_python.LanguageTool("en-US")


def grammar_ok(text: str) -> bool | None:
    """No LanguageTool match of any rule (spelling included); empty text fails; None when
    LanguageTool is not installed."""
    if not grammar_available():
        return None
    text = text.strip()
    return bool(text) and not _language_tool().check(text)


def sentence_to_words_score(output: str, sample: dict) -> float | None:
    """Words-to-Sentence: inclusion AND grammar; None without LanguageTool."""
    grammar = grammar_ok(output)
    return None if grammar is None else float(grammar and words_inclusion_score(output, sample) == 1.0)


def grammar_score(output: str, sample: dict) -> float | None:
    """Summary / paraphrase: the grammar check alone (the paper's accuracy); None without
    LanguageTool. (v0 code also multiplied in ROUGE-L or (1-BLEU)*BERTScore; not done here.)"""
    grammar = grammar_ok(output)
    return None if grammar is None else float(grammar)


# ---------------------------------------------------------------- dispatch

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
    """The 0/1 score of ``output`` for one official ``sample``; None when not scorable here."""
    try:
        fn = METRICS[metric]
    except KeyError:
        raise ValueError(f"unknown ParallelBench metric {metric!r}; known: {sorted(METRICS)}") from None
    return fn(output, sample)
