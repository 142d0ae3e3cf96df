"""Run a kernel test file as a script in a fresh interpreter, with ``DLLM_KERNELS=triton`` and
(on CPU) ``TRITON_INTERPRET=1``.

The interpreter flag is read when ``triton.jit`` decorates a kernel, i.e. when dllm is first
imported, which pytest has long done by the time a test runs; so each kernel test file has a
``__main__`` that runs its check on the device named in argv and prints ``KERNEL-OK``.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
NO_TRITON = "triton is not installed (it is in the test and gpu extras: pip install -e '.[test]')"
# Where the native kernel checks run (a CUDA device, the suite on it), they cover the interpreted
# ones, which fail there: triton 3.6's interpreter under numpy 2.5 (issue 38). On the CPU they stay.
NATIVE_RUNS = torch.cuda.is_available() and os.environ.get("DLLM_TEST_DEVICE", "cpu").startswith("cuda")
skip_where_native_runs = pytest.mark.skipif(
    NATIVE_RUNS, reason="the native kernel check runs on this CUDA device; triton 3.6's interpreter fails under "
                        "numpy 2.5 here ('only 0-dimensional arrays can be converted to Python scalars')")


def run_kernel_check(script: str, device: str, interpret: bool) -> None:
    """Run ``script`` with ``device`` as its argument; fail with its output unless it printed
    KERNEL-OK and exited 0."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["DLLM_KERNELS"] = "triton"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    done = subprocess.run([sys.executable, script, device], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and "KERNEL-OK" in done.stdout, done.stdout + done.stderr[-6000:]
