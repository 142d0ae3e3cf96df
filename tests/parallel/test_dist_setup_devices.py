"""init_distributed's device and backend under torchrun, without a process group or a GPU:
torch.distributed's set-up and torch.cuda are stood in for. On CUDA each rank makes its
LOCAL_RANK's GPU current before NCCL starts (NCCL's collectives and Triton's kernels run on the
current device; every rank on cuda:0 would share one GPU), and the DistContext names that GPU."""
from __future__ import annotations

import pytest
import torch

from dllm.parallel import dist as dist_setup


@pytest.fixture
def calls(monkeypatch):
    """What the set-up did, in order: ("set_device", index), ("init", backend)."""
    seen: list = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: seen.append(("set_device", index)))
    monkeypatch.setattr(dist_setup.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist_setup.dist, "init_process_group",
                        lambda backend, timeout=None: seen.append(("init", backend)))
    monkeypatch.delenv("DLLM_DEVICE", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "8")
    return seen


def test_a_cuda_rank_takes_its_local_gpu_before_nccl_starts(monkeypatch, calls):
    monkeypatch.setenv("RANK", "6")  # the second node's third process
    monkeypatch.setenv("LOCAL_RANK", "2")
    for device in ("cuda", "auto"):
        calls.clear()
        ctx = dist_setup.init_distributed(device)
        assert calls == [("set_device", 2), ("init", "nccl")]
        assert (ctx.rank, ctx.world_size, ctx.device, ctx.is_main) == (6, 8, torch.device("cuda", 2), False)


def test_without_local_rank_the_rank_is_the_gpu(monkeypatch, calls):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert dist_setup.init_distributed("cuda").device == torch.device("cuda", 3)
    assert calls == [("set_device", 3), ("init", "nccl")]


def test_a_cpu_rank_joins_gloo_and_touches_no_gpu(monkeypatch, calls):
    monkeypatch.setenv("RANK", "0")
    ctx = dist_setup.init_distributed("cpu")
    assert calls == [("init", "gloo")] and ctx.device == torch.device("cpu") and ctx.is_main
