"""CUDA graphs captured before ``make_batch_invariant`` swapped the model's modules are not
replayed after it: the graph runner records the model's ``kernel_version`` and a moved version
gets a fresh runner, which captures again (a real graph would replay the old kernels)."""
from __future__ import annotations

import weakref

import pytest
import torch

import dllm
from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.models.batch_invariant import make_batch_invariant
from dllm.runner import graphs

PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11], [100, 3, 9]]
BASE = dict(gen_length=16, block_length=8, steps=8, policy="threshold", policy_args={"tau": 0.3}, cache="dual")


@pytest.fixture()
def emulated(monkeypatch, test_device):
    if test_device == "cpu":
        monkeypatch.setattr(graphs, "BACKEND", graphs.EmulatedGraph)
    monkeypatch.setattr(graphs, "_RUNNERS", weakref.WeakKeyDictionary())
    return graphs


def test_graphs_captured_before_a_swap_are_dropped(tiny_dirs, test_device, emulated):
    model = dllm.load(tiny_dirs["llada"], device=test_device, dtype="float32").model
    config = GenerationConfig(**BASE, cuda_graphs=True)
    decode(model, PROMPTS, config)
    before = graphs.graph_runner(model)
    assert before.stats.captures > 0 and before.graphs
    assert graphs.graph_runner(model) is before  # kept while the modules stay
    make_batch_invariant(model)
    after = graphs.graph_runner(model)
    assert after is not before and not after.graphs and after.stats.captures == 0
    replayed = decode(model, PROMPTS, config)
    assert graphs.graph_runner(model) is after and after.stats.captures > 0  # captured again, new kernels
    eager = decode(model, PROMPTS, GenerationConfig(**BASE))
    assert torch.equal(replayed.answer, eager.answer)
