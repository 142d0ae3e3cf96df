"""Pareto plots: real fronts, labels that say what varies, panels split by cache."""
from __future__ import annotations

import pytest

from dllm.bench.plots import describe, pareto_front, plot_pareto, point_labels


def test_pareto_front_keeps_only_undominated_points():
    points = [(1.0, 80.0), (2.0, 60.0), (2.0, 70.0), (3.0, 65.0), (4.0, 50.0), (0.5, 75.0)]
    assert pareto_front(points) == [(1.0, 80.0), (2.0, 70.0), (3.0, 65.0), (4.0, 50.0)]
    assert pareto_front([(1.0, 50.0), (2.0, 60.0)]) == [(2.0, 60.0)]


def test_point_labels_name_what_varies():
    assert point_labels(["low_confidence_k=1", "low_confidence_k=8"]) == ["k=1", "k=8"]
    assert point_labels(["threshold0.7", "threshold0.95"]) == ["0.7", "0.95"]
    assert point_labels(["topk2_none", "topk2_dual+sub4"]) == ["none", "dual+sub4"]
    assert point_labels(["only"]) == [""]


def _summary(lines: int) -> dict:
    runs = []
    for i in range(lines):
        cache = "dual" if i % 2 else "none"
        for k in (1, 2):
            task = {"task": "t", "samples": 4, "shots": 0, "sampling": "all", "config": {"cache": cache}}
            runs.append({"run": f"line{i}_k={k}", "line": f"line{i}", "mean_score": 0.5 / k, "tpf": float(k),
                         "tasks": {"t": task}})
    return {"runs": runs, "meta": {"model": "some/model-dir"}}


def test_plot_writes_a_png_split_by_cache(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "pareto.png"
    assert plot_pareto(_summary(14), path) == [path]
    assert path.stat().st_size > 0
    assert describe(_summary(1)) == "model-dir, 1 tasks x 4 samples (all samples), 0-shot"
