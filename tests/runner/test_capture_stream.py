"""CUDA graph captures on a device share one side stream (as ``torch.cuda.graph`` does), so the
memory the warm-ups cached on it is reused by the next capture: a new stream per capture (torch
hands out a pool of them in turn) kept each one's cached blocks apart. Run on the CPU with
stand-ins for torch.cuda's stream, device, graph and synchronise calls (only a GPU reaches
``CudaGraph`` otherwise)."""
from __future__ import annotations

import contextlib

import pytest
import torch

from dllm.runner import graphs


class _Stream:
    made = 0

    def __init__(self, device=None):
        type(self).made += 1
        self.device = device

    def wait_stream(self, other):
        pass


class _Graph:
    def capture_begin(self, pool=None):
        pass

    def capture_end(self):
        pass


@pytest.fixture
def fake_cuda(monkeypatch):
    used = []

    @contextlib.contextmanager
    def on_stream(stream):
        used.append(stream)
        yield

    monkeypatch.setattr(graphs, "_CAPTURE_STREAMS", {})
    monkeypatch.setattr(_Stream, "made", 0)
    monkeypatch.setattr(torch.cuda, "Stream", _Stream)
    monkeypatch.setattr(torch.cuda, "stream", on_stream)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _Stream.__new__(_Stream))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _Graph)
    return used


def test_captures_on_a_device_share_one_side_stream(fake_cuda):
    calls = []
    cuda0, cuda1 = torch.device("cuda", 0), torch.device("cuda", 1)
    for device in (cuda0, cuda0, cuda0, cuda1):
        graph = graphs.CudaGraph(lambda: calls.append(1) or torch.zeros(1), None, device)
        assert graph.out.shape == (1,)
    assert len(calls) == 4 * 3  # two warm-ups and the capture each
    assert _Stream.made == 2  # one per device, not one per capture
    assert len({id(s) for s in fake_cuda[:6]}) == 1 and fake_cuda[6] is not fake_cuda[0]
    assert graphs.capture_stream(cuda0) is fake_cuda[0] and graphs.capture_stream(cuda1) is fake_cuda[6]
