"""The batch-invariance section times the decode step in both modes, side by side, per batch,
cache (dual, uncached) and forward mode (eager, and CUDA graphs where they run: emulated here),
and captures its graphs again after the modules are swapped."""
from __future__ import annotations

import weakref

import torch

from dllm.bench.batch_invariance import batch_invariance_section
from dllm.bench.random_models import build_random_model
from dllm.runner import graphs


def test_steps_are_timed_per_batch_cache_and_mode_in_both_modes(monkeypatch):
    monkeypatch.setattr(graphs, "BACKEND", graphs.EmulatedGraph)
    monkeypatch.setattr(graphs, "_RUNNERS", weakref.WeakKeyDictionary())
    model = build_random_model("tiny-llada", device=torch.device("cpu"), dtype=torch.float32)
    before_swap = []  # the graph runner the default mode replayed through
    forget = graphs.forget
    monkeypatch.setattr(graphs, "forget", lambda m: before_swap.append(graphs._RUNNERS.get(m)) or forget(m))
    result = batch_invariance_section(model, rows=3, prompt_length=4, gen_length=8, step_batches=(1, 2))
    keys = {(s["batch"], s["cache"], s["mode"]) for s in result["steps"]}
    assert keys == {(b, c, m) for b in (1, 2) for c in ("dual", "none") for m in ("eager", "graphs")}
    assert all(s["default_s"] > 0 and s["batch_invariant_s"] > 0 for s in result["steps"])
    assert before_swap[0].stats.captures > 0  # the default mode replayed graphs
    after = graphs._RUNNERS.get(model)
    assert after is not before_swap[0] and after.stats.captures > 0  # captured again after the swap
