"""Fresh-sample scoring: the official tasks, templates and scorers on generated answers, with
seeds outside training's range, and run grids that name each model's own files."""
from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import pytest

import dllm
from dllm.api.model import default_model_path
from dllm.bench.metrics import score
from dllm.bench.parallelbench import Run, plan_parallelbench, run_parallelbench
from dllm.bench.parallelbench_cli import build_runs
from dllm.bench.parallelbench_fresh import FRESH_SEED_MIN, FRESH_TASKS, FreshSamples, fresh_samples
from dllm.bench.plots import describe
from dllm.cli import main as cli_main
from dllm.data.prompts import build_messages, load_task_configs
from dllm.data.waiting_line import official_test_contexts
from dllm.bench.results_store import read_samples
from tests.pb_data import official, require_data

SEED = FRESH_SEED_MIN + 7
K1 = Run(name="k1", line="top-k", options={"policy": "low_confidence"}, tokens_per_step=1)


def _answer_text(sample: dict) -> str:
    answer = sample["answer"]
    return answer if isinstance(answer, str) else answer["example"]


@pytest.mark.parametrize("task", FRESH_TASKS)
def test_fresh_samples_are_official_shaped_unseen_and_scored_by_the_official_metric(task):
    data = require_data()
    spec = load_task_configs(data)[task]
    samples = fresh_samples(data, task, 8, SEED)
    reference = official(task)[0]
    assert len(samples) == 8
    assert all(set(s) == set(reference) and set(s["input"]) == set(reference["input"]) for s in samples)
    assert all(score(spec.metric, _answer_text(s), s) == 1.0 for s in samples)  # the label scores 1
    key = "symbols" if task == "puzzle/latin_square_n4" else "context"
    seen = official_test_contexts(data)
    assert not any(s["input"][key] in seen for s in samples)
    assert build_messages(spec, samples[0], 1)  # the one-shot protocol works on them too
    if key == "context":  # equal shares of list lengths 3-6, shortest first, as the official files
        lengths = [len(json.loads(s["input"]["context"])) for s in samples]
        assert lengths == sorted(lengths) and Counter(lengths) == {3: 2, 4: 2, 5: 2, 6: 2}


def test_fresh_samples_follow_the_seed_and_differ_from_the_official_file():
    data = require_data()
    a = fresh_samples(data, "waiting_line/copy", 12, SEED)
    assert a == fresh_samples(data, "waiting_line/copy", 12, SEED)
    assert a != fresh_samples(data, "waiting_line/copy", 12, SEED + 1)
    assert not {s["input"]["context"] for s in a} & {s["input"]["context"] for s in official("waiting_line/copy")}


@pytest.mark.parametrize("count, seed, tasks, message", [
    (4, 3, ["waiting_line/copy"], "pick a seed >= 1000000"),
    (4, 10_003, ["waiting_line/copy"], "range training draws from"),
    (0, SEED, ["waiting_line/copy"], "--fresh-samples must be >= 1"),
    (4, SEED, ["puzzle/sudoku_n4_12"], "no generator for task"),
])
def test_bad_fresh_requests_are_refused_before_any_work(count, seed, tasks, message):
    with pytest.raises(ValueError, match=message):
        plan_parallelbench(require_data(), [K1], tasks=tasks, shots=0, limit=None, batch_size=4,
                           fresh=FreshSamples(count, seed))


def test_cli_needs_both_fresh_options_and_checks_them_before_loading(tmp_path, capsys):
    common = ["bench", "parallelbench", "--model", str(tmp_path / "no-model"), "--out", str(tmp_path / "o"),
              "--data", str(require_data())]  # the seed is checked against the official samples
    assert cli_main(common + ["--fresh-samples", "4"]) == 2
    assert "go together" in capsys.readouterr().err
    assert cli_main(common + ["--fresh-samples", "4", "--fresh-seed", "0"]) == 2
    assert "pick a seed >= 1000000" in capsys.readouterr().err  # not a model-loading error


@pytest.fixture(scope="module")
def model(tiny_dirs):
    path = default_model_path()
    return dllm.load(path if path.exists() else tiny_dirs["llada"])


def test_fresh_run_scores_the_generated_samples_and_records_its_source(model, tmp_path):
    data = require_data()
    tasks = ["waiting_line/copy", "puzzle/latin_square_n4"]
    fresh = FreshSamples(4, SEED)
    summary = run_parallelbench(model, data, [K1], tasks=tasks, shots=0, limit=None, batch_size=4,
                                out_dir=tmp_path, fresh=fresh)
    stored = json.loads((tmp_path / "summary.json").read_text())
    rows = stored["rows"]
    assert {r["source"] for r in rows} == {fresh.label} and all(r["samples"] == 4 for r in rows)
    assert fresh.label in describe(stored)  # tables and plots say the samples were generated
    written = read_samples(tmp_path, "k1", "waiting_line/copy")
    expected = fresh_samples(data, "waiting_line/copy", 4, SEED)
    assert [w["label"] for w in written] == [s["answer"] for s in expected]
    metric = load_task_configs(data)["waiting_line/copy"].metric
    assert [w["score"] for w in written] == [score(metric, w["output"], s) for w, s in zip(written, expected)]
    assert summary["runs"][0]["samples"] == 8
    # the same folder refuses official-file rows under the same run name: the fingerprints differ
    with pytest.raises(ValueError, match="already holds run 'k1'"):
        run_parallelbench(model, data, [K1], tasks=tasks, shots=0, limit=4, batch_size=4, out_dir=tmp_path)


def test_run_grids_name_the_model_directory(tmp_path):
    grid = [{"name": "l2pd", "line": "Learn2PD", "options": {"policy": "learn2pd",
                                                           "policy_args": {"filter": "{model}/learn2pd-block8"}}}]
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(grid))
    model_dir = tmp_path / "my-model"
    model_dir.mkdir()
    runs = build_runs(argparse.Namespace(runs=str(path), model=str(model_dir)))
    # the directory as results name it (relative to the working directory when close): same place
    assert Path(runs[0].options["policy_args"]["filter"]).resolve() == (model_dir / "learn2pd-block8").resolve()
