"""End-to-end ParallelBench runs: 2 tasks x 5 samples, two runs, every output file written."""
from __future__ import annotations

import csv
import json

import pytest

import dllm
from dllm.api.model import default_model_path
from dllm.bench.parallelbench import Run, run_parallelbench, summarize
from dllm.bench.results_store import read_samples
from tests.pb_data import require_data

TASKS = ["waiting_line/copy", "waiting_line/shuffle"]


def _model(tiny_dirs):
    path = default_model_path()
    return dllm.load(path if path.exists() else tiny_dirs["llada"])


def test_end_to_end(tiny_dirs, tmp_path):
    data = require_data()
    model = _model(tiny_dirs)
    runs = [Run(name="conf_k1", line="confidence top-k", options={"policy": "low_confidence"}, tokens_per_step=1),
            Run(name="conf_k4", line="confidence top-k", options={"policy": "low_confidence"}, tokens_per_step=4)]
    summary = run_parallelbench(model, data, runs, tasks=TASKS, shots=0, limit=5, batch_size=5, out_dir=tmp_path)
    assert {e["run"] for e in summary["runs"]} == {"conf_k1", "conf_k4"}
    samples = read_samples(tmp_path, "conf_k4", "waiting_line/copy")
    assert len(samples) == 5 and {"prompt", "output", "label", "score", "nfe", "tpf", "decode_order"} <= set(samples[0])
    assert all(s["nfe"] <= 8 for s in samples)  # 32 tokens at 4 per step
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    assert len(rows) == 4
    assert (tmp_path / "pareto.png").stat().st_size > 0
    assert set(summary["pb"]["confidence top-k"]) == {"PB80", "PB75", "PB70"}
    if model.path == default_model_path():  # the trained model copies exactly at one token per step
        k1 = next(e for e in summary["runs"] if e["run"] == "conf_k1")
        assert k1["tasks"]["waiting_line/copy"]["score"] == 1.0


def test_pbx_and_unknown_task(tiny_dirs, tmp_path):
    rows = [{"run": f"k{k}", "line": "L", "task": "t", "samples": 1, "score": s, "nfe": 32 / k, "tpf": k}
            for k, s in [(1, 0.9), (2, 0.78), (4, 0.5)]]
    pb = summarize(rows)["pb"]["L"]
    assert pb == {"PB80": 1, "PB75": 2, "PB70": 2}
    with pytest.raises(ValueError, match="unknown task"):
        run_parallelbench(_model(tiny_dirs), require_data(), [Run(name="a", line="a")], tasks=["nope/x"],
                          shots=0, limit=1, batch_size=1, out_dir=tmp_path)
