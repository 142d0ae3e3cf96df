"""Task configs load from the official folders, and chat prompts are built as ParallelBench v0
builds them (template, backslash-n fix, one-shot turns)."""
from __future__ import annotations

from pathlib import Path

import pytest

from dllm.bench.metrics import METRICS
from dllm.data.prompts import build_messages, default_data_dir, load_samples, load_task_configs
from tests.pb_data import official, require_data

WAITING = ["copy", "reverse", "sort", "shuffle", "insert_index", "insert_random", "remove_index",
           "remove_random", "replace_index", "replace_random"]
TASKS = ([f"waiting_line/{t}" for t in WAITING] + ["puzzle/latin_square_n4", "puzzle/sudoku_n4_12"]
         + [f"words_to_sentence/{t}" for t in ("easy", "medium", "hard")]
         + ["paraphrase_summarize/samsum", "paraphrase_summarize/chatgpt-paraphrases"])
HEADER = "You are managing a waiting line at a customer service desk.\n"


def test_default_data_dir(monkeypatch, tmp_path):
    """The variable wins; else the folder beside a source checkout (a made-up checkout here, so
    the rule is checked whether or not this one sits beside the data)."""
    from dllm.data import prompts

    monkeypatch.setenv("DLLM_PARALLELBENCH_DIR", "/somewhere/pb")
    assert default_data_dir() == Path("/somewhere/pb")
    monkeypatch.delenv("DLLM_PARALLELBENCH_DIR")
    beside = tmp_path / "shared" / "data" / "parallelbench"
    beside.mkdir(parents=True)
    monkeypatch.setattr(prompts, "_REPO_ROOT", tmp_path / "checkout")
    assert default_data_dir() == beside


def test_missing_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="DLLM_PARALLELBENCH_DIR"):
        load_task_configs(tmp_path)


def test_task_configs():
    specs = load_task_configs(require_data())
    assert sorted(specs) == sorted(TASKS)  # unshipped W2S variants (easy_n3 ...) are skipped
    for name, spec in specs.items():
        assert spec.name == name and spec.path.is_file() and spec.metric in METRICS
        assert spec.max_tokens == (32 if name.startswith("waiting_line/") else 64)
    assert specs["puzzle/sudoku_n4_12"].metric == "sudoku_score"
    assert specs["words_to_sentence/easy"].metric == "sentence_to_words_score"


def test_load_samples():
    data = require_data()
    assert len(load_samples(data, "waiting_line/copy")) == 100
    assert len(load_samples(data, "puzzle/sudoku_n4_12")) == 108
    with pytest.raises(ValueError, match="unknown task"):
        load_samples(data, "waiting_line/rotate")


def test_exact_zero_shot_prompts():
    specs = load_task_configs(require_data())
    s = official("waiting_line/copy")[0]
    assert build_messages(specs["waiting_line/copy"], s, 0) == [{"role": "user", "content": (
        HEADER + "You need to record the following people in the order they arrived:\n"
        + s["input"]["context"] + "\nPlease copy the list exactly and provide only the final list.\n")}]
    s = official("waiting_line/insert_index")[0]
    assert build_messages(specs["waiting_line/insert_index"], s, 0)[0]["content"] == (
        HEADER + f'A new person "{s["input"]["word"]}" is inserted into the line at position {s["input"]["index"]}:\n'
        + s["input"]["context"] + "\nPlease put the new person at the specified position and provide only the final list.\n")
    s = official("puzzle/sudoku_n4_12")[0]
    content = build_messages(specs["puzzle/sudoku_n4_12"], s, 0)[0]["content"]
    assert "\\" not in content and content.endswith("Input:\n" + s["input"]["sudoku"] + "\nOutput:\n")
    s = official("puzzle/latin_square_n4")[0]
    assert build_messages(specs["puzzle/latin_square_n4"], s, 0)[0]["content"] == (
        f"Generate a Latin square of size 4 with the symbols {s['input']['symbols']}. Only output the final result as CSV.")
    s = official("paraphrase_summarize/samsum")[0]
    assert build_messages(specs["paraphrase_summarize/samsum"], s, 0)[0]["content"] == (
        "Summarize the following conversation. Only output the final result.\n\n" + s["input"]["text"] + "\n\nSummary:")


def test_every_prompt_is_filled():
    data = require_data()
    for task, spec in load_task_configs(data).items():
        for s in load_samples(data, task):
            for m in build_messages(spec, s, 1):
                assert "{" not in m["content"] or task.startswith("paraphrase"), (task, m)
                assert "\\n" not in m["content"], (task, m)


def test_one_shot_turns():
    specs = load_task_configs(require_data())
    for task, answer_of in [("waiting_line/copy", lambda a: a), ("waiting_line/shuffle", lambda a: a["example"]),
                            ("puzzle/latin_square_n4", lambda a: a["example"]), ("puzzle/sudoku_n4_12", lambda a: a)]:
        s = official(task)[3]
        icl = s["input"]["icl_examples"][0]
        msgs = build_messages(specs[task], s, 1)
        assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
        assert msgs[0] == build_messages(specs[task], icl, 0)[0]
        assert msgs[1]["content"] == answer_of(icl["answer"])
        assert msgs[2] == build_messages(specs[task], s, 0)[0]
    # Text Writing ships no example: one-shot falls back to zero-shot, as in the benchmark
    s = official("words_to_sentence/easy")[0]
    assert build_messages(specs["words_to_sentence/easy"], s, 1) == [
        {"role": "user", "content": "Construct a single, coherent sentence using the words dog, park, ball, and throw."}]
    with pytest.raises(ValueError):
        build_messages(specs["waiting_line/copy"], s, -1)


def test_no_data_dir_is_a_clear_error(monkeypatch, tmp_path):
    import dllm.data.prompts as prompts

    monkeypatch.delenv("DLLM_PARALLELBENCH_DIR", raising=False)
    monkeypatch.setattr(prompts, "_REPO_ROOT", tmp_path / "installed")  # no ../shared beside it
    with pytest.raises(FileNotFoundError, match="--data DIR.*DLLM_PARALLELBENCH_DIR"):
        default_data_dir()


def test_default_shots_are_the_task_config_icl_example_count():
    specs = load_task_configs(require_data())
    assert specs["waiting_line/copy"].icl_example_count == 1
    assert specs["puzzle/latin_square_n4"].icl_example_count == 1
    s = official("waiting_line/copy")[0]
    assert build_messages(specs["waiting_line/copy"], s, None) == build_messages(specs["waiting_line/copy"], s, 1)
    w2s = official("words_to_sentence/easy")[0]
    assert len(build_messages(specs["words_to_sentence/easy"], w2s, None)) == 1  # Text Writing: zero-shot
