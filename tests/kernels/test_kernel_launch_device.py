"""A Triton launch runs with the tensors' CUDA
device current: Triton launches on the current device, so a model on cuda:1 with cuda:0 current
had its first kernel refused. torch.cuda.device is stood in for (no GPU)."""
from __future__ import annotations

import contextlib

import torch

import dllm.kernels as kernels


def test_triton_launches_run_on_the_tensors_device(monkeypatch):
    current = ["cuda:0"]

    @contextlib.contextmanager
    def device(d):
        before, current[0] = current[0], str(d)
        yield
        current[0] = before

    monkeypatch.setattr(torch.cuda, "device", device)
    monkeypatch.setattr(kernels, "kernel_backend", lambda d=None: "triton")
    seen = []
    out = kernels._dispatch("x", torch.device("cuda", 1), lambda: seen.append(current[0]) or 7, lambda: None)
    assert out == 7 and seen == ["cuda:1"] and current == ["cuda:0"]
    kernels._dispatch("x", torch.device("cpu"), lambda: seen.append(current[0]), lambda: None)  # interpreted
    assert seen == ["cuda:1", "cuda:0"]
