"""Every offline metric gives 1 on the official answers and 0 on corrupted ones."""
from __future__ import annotations

import json

import pytest

from dllm.bench.metrics import parse_list, score
from dllm.data.prompts import load_task_configs
from tests.pb_data import official, require_data

LIST_TASKS = ["copy", "reverse", "sort", "shuffle", "insert_index", "insert_random", "remove_index",
              "remove_random", "replace_index", "replace_random"]


def _answer(sample) -> str:
    return sample["answer"] if isinstance(sample["answer"], str) else sample["answer"]["example"]


def _metric(task):
    return load_task_configs(require_data())[task].metric


def _dump(items):
    return json.dumps(items)


@pytest.mark.parametrize("name", LIST_TASKS)
def test_list_metrics(name):
    task = f"waiting_line/{name}"
    metric = _metric(task)
    for sample in official(task):
        gold = parse_list(_answer(sample))
        assert score(metric, _answer(sample), sample) == 1.0
        word = sample["input"].get("word")
        i, j = [k for k, x in enumerate(gold) if x != word][:2]  # a pair of original names
        swapped = list(gold)
        swapped[i], swapped[j] = swapped[j], swapped[i]
        dropped = gold[:-1]
        wrong = gold[:-1] + ["Nobody Here"]
        for bad in (dropped, wrong):
            assert score(metric, _dump(bad), sample) == 0.0, (name, bad)
        if name != "shuffle" and not (name == "remove_random" and len(gold) <= 2):
            # a swapped pair is another valid shuffle, but wrong for every ordered task
            assert score(metric, _dump(swapped), sample) == 0.0, (name, swapped)
    if name == "shuffle":  # the unshuffled input is not a shuffle
        sample = official(task)[0]
        assert score(metric, _dump(sample["answer"]["input"]), sample) == 0.0


def test_latin_square_metric():
    for sample in official("puzzle/latin_square_n4"):
        text = sample["answer"]["example"]
        assert score("latin_square_score", text, sample) == 1.0
        rows = text.splitlines()
        assert score("latin_square_score", "\n".join([rows[1], rows[0]] + rows[2:]), sample) == 1.0  # still Latin
        wrong = text.replace(sample["answer"]["symbols"][0], "#", 1)
        assert score("latin_square_score", wrong, sample) == 0.0
        assert score("latin_square_score", "\n".join([rows[0]] * 4), sample) == 0.0


def test_sudoku_metric():
    for sample in official("puzzle/sudoku_n4_12"):
        assert score("sudoku_score", sample["answer"], sample) == 1.0
        g = sample["answer"].splitlines()
        assert score("sudoku_score", "\n".join([g[1], g[0]] + g[2:]), sample) == 0.0


def test_words_to_sentence_is_not_scored_without_languagetool():
    pytest.importorskip("dllm")
    try:
        import language_tool_python  # noqa: F401
        pytest.skip("LanguageTool installed: grammar is scored")
    except ImportError:
        pass
    sample = official("words_to_sentence/easy")[0]
    assert score("sentence_to_words_score", "I throw the ball for my dog at the park.", sample) is None


def test_unknown_metric():
    with pytest.raises(ValueError, match="unknown ParallelBench metric"):
        score("bleu", "x", {})
