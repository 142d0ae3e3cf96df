"""The waiting-line generator: reproduces the official files record for record with the
official seeds (which proves the procedure training uses with other seeds), keeps its
invariants on any seed, and lists the official inputs training must hold out."""
from __future__ import annotations

import functools
import json
import random

import pytest
import yaml

from dllm.bench.metrics import score
from dllm.data.names import load_names
from dllm.data.waiting_line import (TASKS, generate_split, generate_waiting_line, list_to_str,
                                    official_seed, official_test_contexts)
from tests.pb_data import official, require_data

METRIC = {"copy": "list_match_score", "reverse": "list_match_score", "sort": "list_match_score",
          "shuffle": "list_shuffle_score", "insert_index": "list_match_score",
          "insert_random": "list_random_insert_score", "remove_index": "list_match_score",
          "remove_random": "list_random_remove_score", "replace_index": "list_match_score",
          "replace_random": "list_random_replace_score"}

# A small synthetic pool, so the invariant tests run without the official data.
FIRST = ["Ann", "Bob", "Cid", "Dee", "Eve", "Fay", "Gus", "Hal"]
LAST = ["Ames", "Bose", "Cole", "Dunn", "Ely", "Ford", "Gray", "Hunt"]
POOL = [f"{f} {l}" for f in FIRST for l in LAST]


@functools.cache
def _configs() -> dict:
    return yaml.safe_load((require_data() / "waiting_line" / "task_config.yaml").read_text())


def _config(task: str) -> dict:
    return _configs()[f"waiting_line/{task}"]


def test_official_seeds():
    for task in TASKS:
        assert official_seed(task) == _config(task)["seed"], task


def test_names_pool():
    data = require_data()
    first, last = yaml.safe_load((data / "first_last_names.yaml").read_text())
    names = load_names(data)
    assert len(names) == len(first) * len(last) == 92 * 192
    assert names[:2] == [f"{first[0]} {last[0]}", f"{first[0]} {last[1]}"]
    assert len(set(names)) < len(names)  # repeated last names are kept, as the generator needs


@pytest.mark.parametrize("task", TASKS)
def test_reproduces_official_file(task):
    """Every record of the shipped file, one-shot example included, is regenerated exactly."""
    data = require_data()
    cfg = _config(task)
    ours = generate_split(task, random.Random(cfg["seed"]), load_names(data), min_length=cfg["min_length"],
                          max_length=cfg["max_length"], per_length=cfg["samples_per_length"])
    theirs = official(f"waiting_line/{task}")
    assert len(ours) == len(theirs) == cfg["num_samples"]
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a == b, (task, i)
    assert json.dumps(ours[0]) == json.dumps(theirs[0])  # key order too


@pytest.mark.parametrize("task", TASKS)
def test_invariants_on_other_seeds(task):
    rng = random.Random(1234)
    for _ in range(40):
        length = rng.randint(3, 6)
        s = generate_waiting_line(task, rng, POOL, length)
        items = json.loads(s["input"]["context"])
        assert len(items) == length == s["metadata"]["length"]
        assert len({n.split()[0] for n in items}) == length and len({n.split()[1] for n in items}) == length
        answer = s["answer"] if isinstance(s["answer"], str) else s["answer"]["example"]
        out = json.loads(answer)
        word, index = s["input"].get("word"), s["input"].get("index")
        if word is not None:
            assert word not in items and word == s["metadata"]["word"]
        if task == "copy":
            assert out == items
        elif task == "reverse":
            assert out == items[::-1]
        elif task == "sort":
            assert out == sorted(items)
        elif task == "shuffle":
            assert sorted(out) == sorted(items) and out != items
        elif task == "insert_index":
            assert 0 <= index <= length and out == items[:index] + [word] + items[index:]
        elif task == "remove_index":
            assert 0 <= index < length and out == items[:index] + items[index + 1 :]
        elif task == "replace_index":
            assert 0 <= index < length and out == items[:index] + [word] + items[index + 1 :]
        if task.endswith("_random"):
            assert s["answer"]["input"] == items and "index" not in s["input"] and s["metadata"]["index"] is None
        assert score(METRIC[task], answer, s) == 1.0


def test_other_seeds_differ_and_unknown_task():
    a = generate_waiting_line("copy", random.Random(1), POOL, 4)
    b = generate_waiting_line("copy", random.Random(2), POOL, 4)
    assert a != b and a == generate_waiting_line("copy", random.Random(1), POOL, 4)
    with pytest.raises(ValueError, match="unknown waiting-line task"):
        generate_waiting_line("rotate", random.Random(0), POOL, 3)


def test_list_string_format():
    assert list_to_str(["A B", "C D"]) == '["A B", "C D"]' == json.dumps(["A B", "C D"])


def test_official_test_contexts():
    data = require_data()
    contexts = official_test_contexts(data)
    for task in TASKS:
        for sample in official(f"waiting_line/{task}"):
            assert sample["input"]["context"] in contexts
            assert sample["input"]["icl_examples"][0]["input"]["context"] in contexts
    assert 1000 < len(contexts) <= 2000 + 200  # 10 files x (100 tests + 100 examples), plus Latin-square symbols
    # a training stream on another seed rarely hits them, and a hit is detectable
    rng, names = random.Random(7), load_names(data)
    fresh = [generate_waiting_line("copy", rng, names, 4)["input"]["context"] for _ in range(50)]
    assert sum(c in contexts for c in fresh) == 0
