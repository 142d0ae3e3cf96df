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
                 tasks: tuple[str, ...] = TRAIN_TASKS) -> None:
        unknown = sorted(set(tasks) - set(TRAIN_TASKS))
        if unknown:
            raise ValueError(f"unknown training tasks {unknown}; choose from {list(TRAIN_TASKS)}")
        self.tasks = tuple(tasks)
        self.names = load_names(data_dir)
        self.specs = load_task_configs(data_dir)
        self.excluded = official_test_contexts(data_dir)
        self.rng = random.Random(seed)
        self.min_length, self.max_length = min_length, max_length

    def sample(self, task: str | None = None) -> Example:
        task = task or self.rng.choice(self.tasks)
        spec = self.specs[task]
        while True:
            if task == LATIN:
                sample = generate_latin_square(self.rng, size=4)
                key = sample["input"]["symbols"]
            else:
                length = self.rng.randint(self.min_length, self.max_length)
                sample = generate_waiting_line(task.split("/")[1], self.rng, self.names, length)
                key = sample["input"]["context"]
            if key not in self.excluded:
                break
        return Example(task=task, messages=build_messages(spec, sample, shots=0),
                       answer=answer_text(sample), gen_length=spec.max_tokens, sample=sample)
