"""The Latin-square generator reproduces the official file (tests and one-shot examples) with
the official seed, and always yields valid squares."""
from __future__ import annotations

import random

import yaml

from dllm.bench.metrics import latin_square_score
from dllm.data.latin_square import SYMBOLS, generate_latin_square
from tests.pb_data import official, require_data


def test_reproduces_official_file():
    data = require_data()
    cfg = yaml.safe_load((data / "puzzle" / "task_config.yaml").read_text())["puzzle/latin_square_n4"]
    assert cfg["seed"] == 51291
    theirs = official("puzzle/latin_square_n4")
    rng = random.Random(cfg["seed"])
    tests = [generate_latin_square(rng, size=cfg["size"]) for _ in theirs]
    examples = [generate_latin_square(rng, size=cfg["size"]) for _ in theirs]  # the next 100 draws
    for ours, example, sample in zip(tests, examples, theirs):
        assert ours == {k: v for k, v in sample.items() if k != "input"} | {
            "input": {k: v for k, v in sample["input"].items() if k != "icl_examples"}}
        assert example == sample["input"]["icl_examples"][0]


def test_valid_squares_on_other_seeds():
    rng = random.Random(3)
    for size in (3, 4, 5):
        for _ in range(20):
            s = generate_latin_square(rng, size=size)
            symbols = s["answer"]["symbols"]
            assert len(set(symbols)) == size and set(symbols) <= set(SYMBOLS)
            assert s["input"]["symbols"] == "[" + ", ".join(symbols) + "]"
            rows = [r.split(",") for r in s["answer"]["example"].split("\n")]
            assert all(sorted(r) == sorted(symbols) for r in rows + [list(c) for c in zip(*rows)])
            assert latin_square_score(s["answer"]["example"], s) == 1.0
