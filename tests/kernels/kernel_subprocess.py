"""Run a kernel test file as a script in a fresh interpreter, with ``DLLM_KERNELS=triton`` and
(on CPU) ``TRITON_INTERPRET=1``.

The interpreter flag is read when ``triton.jit`` decorates a kernel, i.e. when dllm is first
imported, which pytest has long done by the time a test runs; so each kernel test file has a
``__main__`` that runs its check on the device named in argv and prints ``KERNEL-OK``.
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
NO_TRITON = "triton is not installed (it is in the test and gpu extras: pip install -e '.[test]')"


def interpreter_unusable(triton_version: str, numpy_version: str) -> str | None:
    """Why Triton's interpreter cannot run the kernel checks with these versions, or None.

    Before triton 3.7 the interpreter turns a kernel's integer argument into a Python index with
    ``int()`` of a one-element array, which numpy 2.4 refuses, so every kernel that loops up to a
    runtime bound fails under it (triton 3.6 with numpy 2.4 or 2.5, the GPU image of issue 38)."""
    if Version(triton_version).release < (3, 7) and Version(numpy_version).release >= (2, 4):
        return (f"triton {triton_version}'s interpreter fails under numpy {numpy_version} ('only 0-dimensional "
                "arrays can be converted to Python scalars'; fixed in triton 3.7): install triton>=3.7 or numpy<2.4")
    return None


def _skip_interpreted_reason() -> str | None:
    """Why this run skips the interpreted kernel checks, or None."""
    reasons = []
    if torch.cuda.is_available() and os.environ.get("DLLM_TEST_DEVICE", "cpu").startswith("cuda"):
        reasons.append("the native kernel check runs on this CUDA device and covers the same kernels")
    try:
        import numpy
        import triton
    except ImportError:
        return "; ".join(reasons) or None  # a missing triton is named by the test itself
    broken = interpreter_unusable(triton.__version__, numpy.__version__)
    return "; ".join(reasons + ([broken] if broken else [])) or None


SKIP_INTERPRETED = _skip_interpreted_reason()
skip_interpreted = pytest.mark.skipif(SKIP_INTERPRETED is not None, reason=SKIP_INTERPRETED or "")


# The interpreter runs ``tl.dot`` as numpy's matmul of the whole tile. OpenBLAS's AVX2 (Haswell)
# sgemm kernel gives a row other bits at another row position of the same tile, where a GPU's MMA
# treats every row alike; its Sandybridge kernel does not, so interpreted runs on x86_64 use it and
# the row checks test the Triton program's order, not the emulator's (test_interpreter_dot.py).
ROW_UNIFORM_OPENBLAS = "Sandybridge"


def kernel_env(interpret: bool) -> dict[str, str]:
    """The environment a kernel check runs in: the Triton path forced, the repo importable, and
    under the interpreter TRITON_INTERPRET=1 with a row-uniform OpenBLAS kernel on x86_64."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["DLLM_KERNELS"] = "triton"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    if interpret:
        env["TRITON_INTERPRET"] = "1"
        if platform.machine().lower() in ("x86_64", "amd64"):
            env["OPENBLAS_CORETYPE"] = ROW_UNIFORM_OPENBLAS
    return env


def run_kernel_check(script: str, device: str, interpret: bool) -> None:
    """Run ``script`` with ``device`` as its argument; fail with its output unless it printed
    KERNEL-OK and exited 0."""
    env = kernel_env(interpret)
    done = subprocess.run([sys.executable, script, device], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and "KERNEL-OK" in done.stdout, done.stdout + done.stderr[-6000:]
