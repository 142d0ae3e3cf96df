"""The procedural generators reproduce the official test files exactly (which proves the
procedure the training data uses), and prompts are built as the benchmark builds them."""
from __future__ import annotations

import random

import pytest
import yaml

from dllm.data.latin_square import generate_latin_square
from dllm.data.names import load_names
from dllm.data.prompts import build_messages, load_task_configs
from dllm.data.waiting_line import TASKS, generate_waiting_line, official_test_contexts
from tests.pb_data import official, require_data


def _bucketed(task: str, seed: int, names: list[str]) -> list[dict]:
    rng = random.Random(seed)
    buckets: dict[int, list[dict]] = {n: [] for n in range(3, 7)}
    while any(len(b) < 25 for b in buckets.values()):
        n = rng.randint(3, 6)
        sample = generate_waiting_line(task, rng, names, n)
        if len(buckets[n]) < 25:
            buckets[n].append(sample)
    return [s for n in range(3, 7) for s in buckets[n]]


@pytest.mark.parametrize("task", TASKS)
def test_waiting_line_generator_reproduces_official_files(task):
    data = require_data()
    seed = yaml.safe_load((data / "waiting_line" / "task_config.yaml").read_text())[f"waiting_line/{task}"]["seed"]
    ours = _bucketed(task, seed, load_names(data))
    theirs = official(f"waiting_line/{task}")
    assert [s["input"]["context"] for s in ours] == [s["input"]["context"] for s in theirs]
    assert [s["answer"] for s in ours] == [s["answer"] for s in theirs]


def test_latin_square_generator_reproduces_official_file():
    theirs = official("puzzle/latin_square_n4")
    rng = random.Random(51291)
    ours = [generate_latin_square(rng) for _ in theirs]
    assert [s["answer"] for s in ours] == [s["answer"] for s in theirs]


def test_official_contexts_cover_tests_and_examples():
    contexts = official_test_contexts(require_data())
    sample = official("waiting_line/sort")[7]
    assert sample["input"]["context"] in contexts
    assert sample["input"]["icl_examples"][0]["input"]["context"] in contexts


def test_one_shot_messages():
    data = require_data()
    spec = load_task_configs(data)["waiting_line/shuffle"]
    sample = official("waiting_line/shuffle")[0]
    zero, one = build_messages(spec, sample, 0), build_messages(spec, sample, 1)
    assert len(zero) == 1 and len(one) == 3
    assert one[1] == {"role": "assistant", "content": sample["input"]["icl_examples"][0]["answer"]["example"]}
    assert sample["input"]["context"] in zero[0]["content"] and "{context}" not in zero[0]["content"]
    assert spec.max_tokens == 32
