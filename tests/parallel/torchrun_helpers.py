"""Test helpers: torchrun jobs on the CPU (gloo, one thread a rank), run to the end or started
in the background (a server), with the checkout on the path."""
from __future__ import annotations

import os
import subprocess
import sys


def torchrun_command(args: list[str], nproc: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *args]


def cpu_env(extra: dict | None = None) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.getcwd(), "DLLM_DEVICE": "cpu", **(extra or {})}


def torchrun(args: list[str], nproc: int, env: dict | None = None, timeout: float = 120):
    """Run ``torchrun --nproc_per_node nproc ARGS`` to its end (bounded by ``timeout``)."""
    return subprocess.run(torchrun_command(args, nproc), capture_output=True, text=True, timeout=timeout,
                          env=cpu_env(env))
