"""Every offline metric gives 1 on the official answers of every shipped sample and 0 on
corrupted ones (a swapped pair, a dropped item, a wrong item); parsing quirks match the
benchmark's lenient mode."""
from __future__ import annotations

import json

import pytest

from dllm.bench.metrics import (METRICS, grammar_available, parse_list, score, sudoku_score,
                                words_inclusion_score)
from dllm.data.prompts import load_task_configs
from tests.pb_data import official, require_data

WAITING = ["copy", "reverse", "sort", "shuffle", "insert_index", "insert_random", "remove_index",
           "remove_random", "replace_index", "replace_random"]


def _answer(sample: dict) -> str:
    return sample["answer"] if isinstance(sample["answer"], str) else sample["answer"]["example"]


def _metric(task: str) -> str:
    return load_task_configs(require_data())[task].metric


@pytest.mark.parametrize("name", WAITING)
def test_list_metrics_on_official_answers(name):
    task = f"waiting_line/{name}"
    metric = _metric(task)
    for sample in official(task):
        gold = parse_list(_answer(sample))
        assert gold == json.loads(_answer(sample))
        assert score(metric, _answer(sample), sample) == 1.0
        assert score(metric, "Sure! The final list is:\n" + _answer(sample) + "\n", sample) == 1.0
        word = sample["input"].get("word")
        i, j = [k for k, x in enumerate(gold) if x != word][:2]  # two names of the original list
        swapped = list(gold)
        swapped[i], swapped[j] = swapped[j], swapped[i]
        for bad in (gold[:-1], gold[:-1] + ["Nobody Here"], gold + [gold[0]]):
            assert score(metric, json.dumps(bad), sample) == 0.0, (name, bad)
        if name != "shuffle":  # a swapped pair is another valid shuffle, but wrong for every ordered task
            assert score(metric, json.dumps(swapped), sample) == 0.0, (name, swapped)
        else:
            assert score(metric, sample["input"]["context"], sample) == 0.0  # unshuffled


def test_parse_list_quirks():
    assert parse_list('Answer: ["A B", "C D"]') == ["A B", "C D"]
    assert parse_list('["x"] then ["A B", "C D"] trailing') == ["A B", "C D"]  # the last list wins
    assert parse_list('"A B", "C D"') == ["A B", "C D"]  # no bracket: the whole text
    assert parse_list('["A B", "C D",]') == ["A B", "C D"]  # blank items dropped
    assert parse_list("['A B']") == ["'A B'"]  # only double quotes and spaces are stripped
    assert parse_list('["A B", "C D"') == ["A B", "C D"]  # unclosed: to the end
    assert parse_list("") == []


def test_latin_square_metric():
    for sample in official("puzzle/latin_square_n4"):
        text = sample["answer"]["example"]
        rows = text.split("\n")
        assert score("latin_square_score", text, sample) == 1.0
        assert score("latin_square_score", "Here it is:\n\n" + text.replace(",", ", ") + "\n", sample) == 1.0
        assert score("latin_square_score", "\n".join([rows[1], rows[0]] + rows[2:]), sample) == 1.0  # another valid square
        a = sample["answer"]["symbols"][0]
        assert score("latin_square_score", text.replace(a, "#", 1), sample) == 0.0  # wrong symbol
        assert score("latin_square_score", "\n".join(rows[:3]), sample) == 0.0  # dropped row
        assert score("latin_square_score", "\n".join([rows[0]] * 4), sample) == 0.0  # repeated row
        cells = [r.split(",") for r in rows]
        cells[0][0], cells[0][1] = cells[0][1], cells[0][0]  # swapped pair breaks two columns
        assert score("latin_square_score", "\n".join(",".join(r) for r in cells), sample) == 0.0


def test_sudoku_metric():
    samples = official("puzzle/sudoku_n4_12")
    assert len(samples) == 108
    for sample in samples:
        gold = sample["answer"]
        g = gold.split("\n")
        assert score("sudoku_score", gold, sample) == 1.0
        assert score("sudoku_score", "\n".join(", ".join(row) for row in g), sample) == 1.0  # spaced CSV
        assert score("sudoku_score", "Output:\n" + gold + "\n", sample) == 1.0
        assert score("sudoku_score", "\n".join([g[1], g[0]] + g[2:]), sample) == 0.0  # swapped rows
        assert score("sudoku_score", "\n".join(g[:3]), sample) == 0.0  # dropped row
        wrong = g[0][:-1] + str(int(g[0][-1]) % 4 + 1)
        assert score("sudoku_score", "\n".join([wrong] + g[1:]), sample) == 0.0  # wrong digit
    # four-digit lines must number exactly four (no "first four" rule)
    assert sudoku_score(samples[0]["answer"] + "\n1234", samples[0]) == 0.0


def test_words_inclusion():
    for level in ("easy", "medium", "hard"):
        for sample in official(f"words_to_sentence/{level}"):
            words = sample["answer"]["words"]
            assert words_inclusion_score("We " + " and ".join(words) + ".", sample) == 1.0
            if "example" in sample["answer"]:
                assert words_inclusion_score(sample["answer"]["example"], sample) == 1.0
            rest = " ".join(words[1:])
            if words[0] not in rest:
                assert words_inclusion_score("We " + rest + ".", sample) == 0.0  # dropped word


def test_grammar_metrics_not_scored_without_languagetool():
    if grammar_available():
        pytest.skip("language_tool_python is installed: grammar metrics are scored")
    for task in ("words_to_sentence/easy", "paraphrase_summarize/samsum", "paraphrase_summarize/chatgpt-paraphrases"):
        sample = official(task)[0]
        assert score(_metric(task), "A perfectly fine sentence about a dog in the park.", sample) is None


def test_every_config_metric_is_known():
    for spec in load_task_configs(require_data()).values():
        assert spec.metric in METRICS


def test_unknown_metric():
    with pytest.raises(ValueError, match="unknown ParallelBench metric 'bleu'.*list_match_score"):
        score("bleu", "x", {})
