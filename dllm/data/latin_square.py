"""Procedural 4x4 Latin squares in the official ParallelBench record shape (independent code).

Symbols are drawn from A-Z and 0-9; a cyclic square is shuffled by rows and then by columns.
"""
from __future__ import annotations

import random
import string

SYMBOLS = string.ascii_uppercase + string.digits


def generate_latin_square(rng: random.Random, size: int = 4) -> dict:
    symbols = rng.sample(SYMBOLS, size)
    rows = [[symbols[(i + j) % size] for j in range(size)] for i in range(size)]
    rng.shuffle(rows)
    cols = list(range(size))
    rng.shuffle(cols)
    square = [[row[c] for c in cols] for row in rows]
    example = "\n".join(",".join(row) for row in square)
    return {"input": {"size": size, "symbols": "[" + ", ".join(symbols) + "]"},
            "answer": {"symbols": symbols, "example": example}, "metadata": {"length": size}}
