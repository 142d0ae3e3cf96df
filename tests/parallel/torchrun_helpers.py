"""Test helpers: torchrun jobs on the CPU (gloo, one thread a rank), run to the end or started
in the background (a server), with the checkout on the path and their temporary files (torchrun's
``torchelastic_*`` log folders, one a launch) in one folder removed when the tests end."""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from functools import lru_cache


def torchrun_command(args: list[str], nproc: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *args]


@lru_cache(maxsize=None)
def _scratch() -> str:
    """The jobs' TMPDIR: made once per test process, removed at its exit."""
    path = tempfile.mkdtemp(prefix="dllm-torchrun-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def cpu_env(extra: dict | None = None) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.getcwd(), "DLLM_DEVICE": "cpu",
            "TMPDIR": _scratch(), **(extra or {})}


def torchrun(args: list[str], nproc: int, env: dict | None = None, timeout: float = 120):
    """Run ``torchrun --nproc_per_node nproc ARGS`` to its end (bounded by ``timeout``)."""
    return subprocess.run(torchrun_command(args, nproc), capture_output=True, text=True, timeout=timeout,
                          env=cpu_env(env))
