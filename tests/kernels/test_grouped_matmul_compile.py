"""``dllm::grouped_matmul_torch`` under ``torch.compile``: the op reads its offsets on the host, so
it carries torch's ``cudagraph_unsafe`` tag and inductor's CUDA-graph check names it (the graph is
split around it, or graphs skipped for that forward, instead of a failed capture); compiled in one
graph it gives eager's outputs (``aot_eager`` unless ``DLLM_TEST_COMPILE_BACKEND`` says otherwise),
and on CUDA under ``mode="reduce-overhead"`` it replays with new offsets each call."""
from __future__ import annotations

import importlib
import os

import pytest
import torch

import dllm.kernels as kernels
from dllm.runner.compiled import compile_available

gm = importlib.import_module("dllm.kernels.grouped_matmul")  # the module, not the dispatch function
TAG = getattr(torch._C.Tag, "cudagraph_unsafe", None)
pytestmark = [pytest.mark.skipif(compile_available() is not None, reason=f"no torch.compile: {compile_available()}"),
              pytest.mark.skipif(TAG is None, reason=f"torch {torch.__version__} has no cudagraph_unsafe tag")]
OFFSETS = ([0, 4, 4, 10], [0, 0, 9, 10], [0, 10, 10, 10])  # rows per expert move between calls


def _inputs(device: str = "cpu"):
    g = torch.Generator().manual_seed(5)
    return torch.randn(10, 8, generator=g).to(device), torch.randn(3, 6, 8, generator=g).to(device)


def _forward(x, w, offsets):
    return torch.relu(kernels.grouped_matmul(x, w, offsets)) + 1.0


def test_op_is_tagged_cudagraph_unsafe():
    assert TAG in torch.ops.dllm.grouped_matmul_torch.default.tags


def test_inductor_cudagraph_check_names_the_op():
    """The check inductor runs before wrapping a graph in CUDA graphs finds the op (untagged, it
    would find nothing and capture the host read)."""
    from torch._inductor.utils import get_first_incompatible_cudagraph_node
    from torch.fx.experimental.proxy_tensor import make_fx

    x, w = _inputs()
    graph = make_fx(lambda x, w, o: gm.grouped_matmul_op(x, w, o) * 2.0)(x, w, torch.tensor(OFFSETS[0]))
    node = get_first_incompatible_cudagraph_node(graph)
    assert node is not None and node.target is torch.ops.dllm.grouped_matmul_torch.default


def test_compiled_gives_eager_outputs(monkeypatch):
    monkeypatch.setenv("DLLM_KERNELS", "torch")  # the op's path, whatever the device
    torch._dynamo.reset()
    backend = os.environ.get("DLLM_TEST_COMPILE_BACKEND", "aot_eager")
    compiled = torch.compile(_forward, backend=backend, fullgraph=True)  # fullgraph: one graph, no break
    x, w = _inputs()
    for offsets in OFFSETS:
        o = torch.tensor(offsets)
        assert torch.equal(compiled(x, w, o), _forward(x, w, o)), offsets
    torch._dynamo.reset()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_reduce_overhead_on_cuda_replays_with_new_offsets(monkeypatch):
    """Warm-up, record and replays: the op runs outside the captured parts, so each call reads its
    own offsets (untagged, the record would fail on the host read)."""
    monkeypatch.setenv("DLLM_KERNELS", "torch")
    torch._dynamo.reset()
    compiled = torch.compile(_forward, mode="reduce-overhead", fullgraph=True)
    x, w = _inputs("cuda")
    for offsets in OFFSETS * 2:
        o = torch.tensor(offsets, device="cuda")
        assert torch.equal(compiled(x, w, o).clone(), _forward(x, w, o)), offsets
    torch._dynamo.reset()
