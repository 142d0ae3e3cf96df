"""Fresh ParallelBench samples: the official tasks, templates and scorers on answers drawn anew.

The official test files are fixed, and a model trained on the project's generators could in
principle fit them by chance; fresh samples check that a score carries over to lists the model
has never seen. Each task's set is built like its official file (ascending list lengths 3-6 in
equal shares for the waiting-line tasks, 4x4 squares for the Latin square, each sample with a
one-shot example of its own), by the project's generators (``dllm.data``), from a stream seeded
by ``(seed, task)``, redrawing any list that appears in the official files.

Training draws its examples from small integer seeds (``train_small --seed S`` and its held-out
``S + 10000``; ``train-filter --seed``), so fresh seeds live at or above ``FRESH_SEED_MIN``: a
smaller one is refused before any work.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from dllm.data.latin_square import generate_latin_square
from dllm.data.names import load_names
from dllm.data.waiting_line import TASKS as WAITING_LINE_TASKS
from dllm.data.waiting_line import generate_waiting_line, official_test_contexts

FRESH_SEED_MIN = 1_000_000
LATIN_SQUARE = "puzzle/latin_square_n4"
FRESH_TASKS = tuple(f"waiting_line/{t}" for t in WAITING_LINE_TASKS) + (LATIN_SQUARE,)
LIST_LENGTHS = (3, 4, 5, 6)


def check_fresh_request(tasks: list[str], count: int, seed: int) -> None:
    """Refuse a seed training may have used, a count below one, or a task without a generator."""
    if count < 1:
        raise ValueError(f"--fresh-samples must be >= 1 per task, got {count}")
    if seed < FRESH_SEED_MIN:
        raise ValueError(f"--fresh-seed {seed} is in the range training draws from (train_small uses --seed S "
                         f"and S + 10000, train-filter its --seed); pick a seed >= {FRESH_SEED_MIN}")
    missing = [t for t in tasks if t not in FRESH_TASKS]
    if missing:
        raise ValueError(f"no generator for task(s) {missing}; fresh samples exist for {list(FRESH_TASKS)}: "
                         "pass --tasks with those only")


def _unseen(draw, excluded: set[str], key) -> dict:
    while True:
        sample = draw()
        if key(sample) not in excluded:
            return sample


def fresh_samples(data_dir: Path, task: str, count: int, seed: int) -> list[dict]:
    """``count`` samples of ``task`` in the official record shape (one-shot example included)."""
    check_fresh_request([task], count, seed)
    rng = random.Random(f"parallelbench-fresh/{seed}/{task}")
    excluded = official_test_contexts(data_dir)
    if task == LATIN_SQUARE:
        def draw(_length: int) -> dict:
            return _unseen(lambda: generate_latin_square(rng, size=4), excluded, lambda s: s["input"]["symbols"])
        lengths = [4] * count
    else:
        names, kind = load_names(data_dir), task.split("/", 1)[1]

        def draw(length: int) -> dict:
            return _unseen(lambda: generate_waiting_line(kind, rng, names, length), excluded,
                           lambda s: s["input"]["context"])
        # equal shares per length (the first lengths take the remainder), shortest first, as the files
        share, extra = divmod(count, len(LIST_LENGTHS))
        lengths = [n for i, n in enumerate(LIST_LENGTHS) for _ in range(share + (i < extra))]
    samples = [draw(n) for n in lengths]
    for sample in samples:
        example = draw(rng.choice(LIST_LENGTHS) if task != LATIN_SQUARE else 4)
        sample["input"]["icl_examples"] = [example]
    return samples


@dataclass(frozen=True, slots=True)
class FreshSamples:
    """``count`` fresh samples per task drawn with ``seed`` (instead of the official files)."""

    count: int
    seed: int

    @property
    def label(self) -> str:
        return f"fresh seed {self.seed}"
