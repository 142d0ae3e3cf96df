"""Process-group set-up and teardown for torchrun (gloo on CPU, NCCL on GPUs)."""
from __future__ import annotations

import datetime
import os
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(kw_only=True, slots=True)
class DistContext:
    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str = "auto", timeout_s: float = 120.0) -> DistContext:
    """Join the torchrun group (a no-op context when not launched by torchrun); ``device`` may be
    "auto" (CUDA when present)."""
    from dllm.models.placement import resolve_device

    device = str(resolve_device(device))
    if "RANK" not in os.environ:
        return DistContext(rank=0, world_size=1, device=torch.device(device))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if device.startswith("cuda"):
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        dev, backend = torch.device("cuda", local), "nccl"
    else:
        dev, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    return DistContext(rank=rank, world_size=world, device=dev)


def leave_together() -> None:
    """End a torchrun process once every rank is done (a no-op outside torchrun).

    After the barrier every rank's results are written. Tearing gloo down from here can still
    abort a finished rank at interpreter exit ("terminate called without an active exception",
    about one run in five on CPU), turning a complete run into a failed one, so the process
    leaves without running C++ destructors."""
    if not dist.is_initialized():
        return
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_rank(body):
    """Run ``body(rank)`` on this torchrun rank; a rank that raises logs
    ``rank R failed: ...`` and exits hard (status 2 for bad input, else 1), so torchrun stops
    the other ranks at once instead of leaving them in a collective. Outside torchrun the error
    propagates as usual. ``DLLM_FAIL_RANK=R`` makes rank R fail (the tests' fault injection)."""
    import logging

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    try:
        if os.environ.get("DLLM_FAIL_RANK") == str(rank):
            raise RuntimeError(f"injected failure on rank {rank}")
        return body(rank)
    except Exception as err:  # noqa: BLE001  one clear line per failing rank, then a hard exit
        if world == 1:
            raise
        bad_input = isinstance(err, (ValueError, FileNotFoundError))
        log = logging.getLogger("dllm")
        log.error("rank %d failed: %s", rank, err, exc_info=not bad_input)
        for handler in log.handlers:
            handler.flush()
        sys.stderr.flush()
        os._exit(2 if bad_input else 1)
