"""bench/pb_table.py's short tables: one row per (policy, cache) of a policy grid, and fresh
samples next to the official files."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(run: str, task: str, score: float, cache: str = "none", sub: int | None = None, source: str | None = None):
    row = {"run": run, "line": run.split("+")[0], "task": task, "samples": 4, "score": score, "nfe": 4.0,
           "tpf": 2.0, "draft_rows": 4.0, "seconds": 1.0, "shots": 0, "sampling": "all",
           "config": {"cache": cache, "sub_block_length": sub}}
    if source:
        row["source"] = source
    return row


def test_by_cache_table_splits_every_grid_run_into_policy_and_cache():
    from dllm.bench.parallelbench import summarize

    table = _module("pb_table")
    grid = _module("policy_grid")
    names = [r["name"] for r in grid.with_caches(grid.policies(), {**grid.CACHES, **grid.SUB_BLOCK})]
    rows = []
    for name in names:
        cache = name.rsplit("+", 1)[1] if not name.endswith("+sub4") else "dual+sub4"
        options = {"cache": "dual", "sub": 4} if cache == "dual+sub4" else {"cache": cache}
        rows.append(_row(name, "waiting_line/copy", 1.0, **options))
    text = table.by_cache_table({"rows": rows, **summarize(rows)}, reference="topk1+none")
    body = [line.split(" | ") for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    pairs = {(cells[0].lstrip("| "), cells[1]) for cells in body}
    policies = {r["name"] for r in grid.policies()}
    assert pairs == {(p, c) for p in policies for c in ("none", "prefix", "dual", "adaptive", "dual+sub4")}


def test_fresh_table_puts_fresh_next_to_official_with_the_difference():
    table = _module("pb_table")
    tasks = ["waiting_line/copy", "waiting_line/sort"]
    official = {"rows": [_row("k1", t, s) for t, s in zip(tasks, (1.0, 0.5))]}
    fresh = {"rows": [_row("k1", t, s, source="fresh seed 1000000") for t, s in zip(tasks, (1.0, 0.25))]}
    text = table.fresh_table(fresh, official, "k1")
    assert "| official files (4 per task) | 75.0 | 100 | 50 |" in text
    assert "fresh seed 1000000" in text and "| fresh - official (points) | -12.5 | +0 | -25 |" in text
    with pytest.raises(SystemExit, match="not in the"):
        table.fresh_table(fresh, official, "k8")
