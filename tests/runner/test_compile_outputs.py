"""compile=True on CUDA (mode="reduce-overhead"): each call's logits outlive the next call.

CUDAGraph Trees write every call's outputs into the same graph memory, so a forward's logits
held past the next forward would change under the caller. No GPU here: torch.compile is
replaced by a stand-in that does what the graph does (one static output, overwritten), and the
mode is the CUDA one."""
from __future__ import annotations

import torch

from dllm.runner import compiled


class _Model(torch.nn.Module):
    device = torch.device("cpu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def _graph_like_compile(model, backend=None, mode=None):
    assert mode == "reduce-overhead"
    static = torch.zeros(3)

    def replay(x):
        return static.copy_(model(x))  # the same buffer every call, as a replayed graph's output

    return replay


def test_compiled_outputs_survive_the_next_call(monkeypatch):
    monkeypatch.setattr(compiled, "compile_mode", lambda device, backend: "reduce-overhead")
    monkeypatch.setattr(compiled.torch, "compile", _graph_like_compile)
    model = _Model()
    first = compiled.call_compiled(model, torch.tensor([1.0, 2.0, 3.0]))
    second = compiled.call_compiled(model, torch.tensor([5.0, 6.0, 7.0]))
    assert first.tolist() == [2.0, 4.0, 6.0]
    assert second.tolist() == [10.0, 12.0, 14.0]


def test_cuda_graphs_only_on_cuda_under_inductor():
    assert compiled.compile_mode(torch.device("cuda", 0), "inductor") == "reduce-overhead"
    assert compiled.compile_mode(torch.device("cpu"), "inductor") is None
    assert compiled.compile_mode(torch.device("cuda"), "aot_eager") is None
