"""Procedural Latin squares in the official ParallelBench record shape (independent code).

``size`` distinct symbols are drawn from A-Z and 0-9; a cyclic square over them is shuffled by
rows and then by columns. With ``random.Random(51291)`` (the official seed) consecutive calls
reproduce puzzle/latin_square_n4.jsonl, and the next 100 calls its one-shot examples.
"""
from __future__ import annotations

import random
import string

SYMBOLS = string.ascii_uppercase + string.digits


def generate_latin_square(rng: random.Random, size: int = 4) -> dict:
    """``{"input": {"size", "symbols": "[H, 4, C, A]"}, "answer": {"symbols": [...],
    "example": "H,4,A,C\\n..."}, "metadata": {"length": size}}``; the example is one valid
    square (the metric accepts any)."""
    symbols = rng.sample(SYMBOLS, size)
    rows = [[symbols[(i + j) % size] for j in range(size)] for i in range(size)]
    rng.shuffle(rows)
    cols = list(range(size))
    rng.shuffle(cols)
    square = [[row[c] for c in cols] for row in rows]
    example = "\n".join(",".join(row) for row in square)
    return {"input": {"size": size, "symbols": "[" + ", ".join(symbols) + "]"},
            "answer": {"symbols": symbols, "example": example}, "metadata": {"length": size}}
