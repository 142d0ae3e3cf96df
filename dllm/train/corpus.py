"""Training examples for the small models: procedural ParallelBench-style tasks.

Each example is (chat messages, answer text, gen_length), drawn from the project's own
generators with the official prompt templates. Official test inputs are never used: any
generated list that equals an official test (or one-shot) input is redrawn.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from dllm.data.latin_square import generate_latin_square
from dllm.data.names import load_names
from dllm.data.prompts import build_messages, load_task_configs
from dllm.data.waiting_line import TASKS as WAITING_LINE_TASKS
from dllm.data.waiting_line import generate_waiting_line, official_test_contexts

LATIN = "puzzle/latin_square_n4"
TRAIN_TASKS = tuple(f"waiting_line/{t}" for t in WAITING_LINE_TASKS) + (LATIN,)


@dataclass(kw_only=True, slots=True)
class Example:
    task: str
    messages: list[dict]
    answer: str
    gen_length: int
    sample: dict


def answer_text(sample: dict) -> str:
    answer = sample["answer"]
    return answer if isinstance(answer, str) else answer["example"]


class TaskCorpus:
    """An endless, seeded stream of training examples over TRAIN_TASKS."""

    def __init__(self, data_dir: Path, *, seed: int, min_length: int = 3, max_length: int = 6,
                 tasks: tuple[str, ...] = TRAIN_TASKS, fixed_pairs: float = 0.0) -> None:
        """``fixed_pairs``: share of waiting-line examples whose people come from a fixed pairing
        (each first name always with the same last name, ``fixed_pair_names``) instead of the
        whole pool; 0 leaves the stream exactly as before."""
        unknown = sorted(set(tasks) - set(TRAIN_TASKS))
        if unknown:
            raise ValueError(f"unknown training tasks {unknown}; choose from {list(TRAIN_TASKS)}")
        self.tasks = tuple(tasks)
        self.names = load_names(data_dir)
        self.fixed_pairs = fixed_pairs
        self.paired_names = fixed_pair_names(self.names) if fixed_pairs else None
        self.specs = load_task_configs(data_dir)
        self.excluded = official_test_contexts(data_dir)
        self.rng = random.Random(seed)
        self.min_length, self.max_length = min_length, max_length

    def sample(self, task: str | None = None, *, shots: int = 0) -> Example:
        """One example of ``task`` (default: a drawn one); ``shots=1`` puts one more generated
        example of the same task before it as a previous exchange, the benchmark's one-shot
        format (``input.icl_examples``); 0 leaves the stream exactly as before."""
        task = task or self.rng.choice(self.tasks)
        spec = self.specs[task]
        sample = self._draw(task)
        if shots:
            sample["input"]["icl_examples"] = [self._draw(task) for _ in range(shots)]
        return Example(task=task, messages=build_messages(spec, sample, shots=shots),
                       answer=answer_text(sample), gen_length=spec.max_tokens, sample=sample)

    def _draw(self, task: str) -> dict:
        """A generated sample of ``task`` whose list is not an official test (or one-shot) input."""
        while True:
            if task == LATIN:
                sample = generate_latin_square(self.rng, size=4)
                key = sample["input"]["symbols"]
            else:
                length = self.rng.randint(self.min_length, self.max_length)
                pool = self.paired_names if self.fixed_pairs and self.rng.random() < self.fixed_pairs else self.names
                sample = generate_waiting_line(task.split("/")[1], self.rng, pool, length)
                key = sample["input"]["context"]
            if key not in self.excluded:
                return sample


def fixed_pair_names(names: list[str], seed: int = 0) -> list[str]:
    """One full name per first name, each with its own last name (a seeded draw): in examples
    drawn from these, a person's first name predicts their last name from the weights alone,
    which makes attending to the neighbouring position pay before any in-context look-up does
    (the previous-token half of the look-up that binds a person's two names)."""
    firsts = list(dict.fromkeys(n.split(" ", 1)[0] for n in names))
    lasts = list(dict.fromkeys(n.split(" ", 1)[1] for n in names))
    if len(lasts) < len(firsts):
        raise ValueError(f"{len(firsts)} first names but only {len(lasts)} distinct last names to pair them with")
    chosen = random.Random(seed).sample(lasts, len(firsts))
    return [f"{first} {last}" for first, last in zip(firsts, chosen)]
