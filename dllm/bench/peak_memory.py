"""Measured peak memory of a decode on CPU, next to its plan (``dllm.engine.memory``).

The peak is the rise of the process's resident-set high-water mark (Linux ``VmHWM``, reset
through ``/proc/self/clear_refs``) over its resident size before the decode, so it counts
what the decode allocates on top of the loaded model; the plan's ``decode_bytes`` is the
bound it is compared with. Each decode runs twice and the second run is measured, so
first-use costs (code pages of kernels, lazily built tables) are not taken for allocations.

Measure in a fresh process (``measure_in_subprocess``): there glibc is told to give every
block of 64 KiB or more straight back to the system when freed, so the resident size follows
the live tensors instead of the allocator's cache.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from typing import Any, Callable

from dllm.engine.config import GenerationConfig

ISOLATED_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {key}; peak memory is measured on Linux only")


def peak_rss_rise(fn: Callable[[], Any]) -> tuple[Any, int]:
    """Run ``fn``; return its result and the bytes by which the resident-set peak rose above
    the resident size before the call."""
    before = _status_bytes("VmRSS")
    with open("/proc/self/clear_refs", "w") as fh:  # resets VmHWM to the current VmRSS
        fh.write("5")
    result = fn()
    return result, max(0, _status_bytes("VmHWM") - before)


def measure_decode(lm, prompts: list[list[int]], config: GenerationConfig) -> dict[str, Any]:
    """Plan and measured peak of ``lm.generate_ids(prompts, config)`` in this process."""
    lm.generate_ids(prompts, config)  # first use: kernels' code pages, allocator arenas
    out, peak = peak_rss_rise(lambda: lm.generate_ids(prompts, config))
    plan = out.memory
    return {"plan": plan, "planned_decode_bytes": plan["total_bytes"] - plan["model_bytes"],
            "measured_bytes": peak}


def measure_in_subprocess(checkpoint: str, prompts: list[list[int]], configs: list[GenerationConfig],
                          timeout: float = 600) -> list[dict[str, Any]]:
    """``measure_decode`` for each config in one fresh process with the allocator set to return
    freed blocks (see the module docstring); configs run in order, the model loads once."""
    request = {"checkpoint": str(checkpoint), "prompts": prompts, "configs": [asdict(c) for c in configs]}
    env = {**os.environ, **ISOLATED_ENV}
    done = subprocess.run([sys.executable, "-m", "dllm.bench.peak_memory"], input=json.dumps(request),
                          capture_output=True, text=True, env=env, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"peak-memory process failed:\n{done.stderr[-4000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    """Read a request (JSON on stdin), print one JSON line per config."""
    import dllm

    request = json.loads(sys.stdin.read())
    lm = dllm.load(request["checkpoint"], device="cpu", dtype="float32")  # host RSS is what is measured
    for options in request["configs"]:
        print(json.dumps(measure_decode(lm, request["prompts"], GenerationConfig(**options))), flush=True)


if __name__ == "__main__":
    main()
