"""``python -m dllm.bench.graph_captures`` counts what a workload captures (capture emulated on CPU)."""
from __future__ import annotations

import weakref

import torch

from dllm.bench import graph_captures
from dllm.bench.random_models import build_random_model
from dllm.runner import graphs


def test_a_long_dual_decode_counts_two_captures(monkeypatch):
    monkeypatch.setattr(graphs, "BACKEND", graphs.EmulatedGraph)
    monkeypatch.setattr(graphs, "_RUNNERS", weakref.WeakKeyDictionary())
    model = build_random_model("tiny-llada", device=torch.device("cpu"), dtype=torch.float32)
    jobs = [([[5] * 16], dict(gen_length=128, block_length=32, steps=32, cache="dual"))]
    r = graph_captures.count(model, jobs)
    # 4 blocks: a refresh and 7 window forwards each; canvas 16 + 128 -> 192 columns, 48 of them padding
    assert (r["forwards"], r["captures"], r["slots_made"]) == (32, 2, 1)
    assert r["token_forwards"] == 4 * 192 + 28 * 32
