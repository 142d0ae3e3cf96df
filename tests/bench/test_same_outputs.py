"""bench/same_outputs.py: a lossless run's outputs are compared with its reference's prompt by
prompt, and one differing sample fails the check."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("same_outputs", ROOT / "bench" / "same_outputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _folder(tmp_path: Path, runs: dict[str, list[tuple[str, int, int]]]) -> Path:
    """runs: name -> [(output, nfe, tokens)] per prompt, on one task; prompts are chat messages."""
    from dllm.bench.results_store import ResultStore

    store = ResultStore(tmp_path / "out")
    for run, samples in runs.items():
        records = [{"prompt": [{"role": "user", "content": f"p{i}"}], "output": out, "nfe": nfe, "tokens": tokens}
                   for i, (out, nfe, tokens) in enumerate(samples)]
        store.write_samples(run, "waiting_line/copy", records[::-1])  # another order than the reference's
        store.add({"run": run, "task": "waiting_line/copy"})
    (tmp_path / "out" / "summary.json").write_text(json.dumps({"rows": store.rows}))
    return tmp_path / "out"


def test_equal_outputs_counted_and_forwards_compared(tmp_path):
    out = _folder(tmp_path, {"topk1": [("a", 30, 15), ("b", 10, 5)], "ssd_N4": [("a", 12, 15), ("b", 8, 5)]})
    rows = {r["run"]: r for r in _module().compare(out, "topk1")}
    assert rows["ssd_N4"]["equal"] == rows["ssd_N4"]["samples"] == 2
    assert rows["ssd_N4"]["nfe"] == 10.0 and rows["ssd_N4"]["tpf"] == 1.0 and rows["ssd_N4"]["fewer"] == 2.0


def test_a_differing_output_is_counted(tmp_path):
    out = _folder(tmp_path, {"topk1": [("a", 30, 15), ("b", 10, 5)], "ssd_N4": [("a", 12, 15), ("c", 8, 5)]})
    rows = {r["run"]: r for r in _module().compare(out, "topk1")}
    assert rows["ssd_N4"]["equal"] == 1 and rows["topk1"]["equal"] == 2
