"""Kernels for the per-step work, each with a torch reference, behind one dispatch point.

``DLLM_KERNELS`` picks the implementation (read at every call):

* ``auto`` (default): the Triton kernel for CUDA tensors when triton imports, the torch
  reference otherwise.
* ``torch``: always the reference.
* ``triton``: always the kernel. On CPU tensors this needs ``TRITON_INTERPRET=1`` set before
  dllm is imported (the Triton interpreter then runs the kernel); never a silent fallback, it
  raises when triton is missing or the interpreter is off.

``CALL_COUNTS`` counts calls per kernel (``"confidence_stats"``) and per kernel and backend
(``"confidence_stats:triton"``, ``"confidence_stats:torch"``), so tests can check which ran.
"""
from __future__ import annotations

import os
from collections import Counter

import torch
from torch import Tensor

from dllm.kernels import confidence_stats as _cs
from dllm.kernels.confidence_stats import StatsScratch, TokenStats, confidence_stats_torch

CALL_COUNTS: Counter = Counter()
BACKENDS = ("auto", "torch", "triton")


def _device_type(device) -> str:
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if isinstance(device, Tensor):
        return device.device.type
    return torch.device(device).type


def kernel_backend(device=None) -> str:
    """``"triton"`` or ``"torch"``: what ``confidence_stats`` runs for tensors on ``device``
    (a device, its type string or a tensor; default: CUDA when available, else CPU).

    Raises when ``DLLM_KERNELS`` is invalid or forces triton where it cannot run.
    """
    choice = os.environ.get("DLLM_KERNELS", "auto").strip().lower() or "auto"
    if choice not in BACKENDS:
        raise ValueError(f"DLLM_KERNELS={choice!r}; use one of {BACKENDS}")
    dev = _device_type(device)
    if choice == "torch":
        return "torch"
    if choice == "triton":
        if not _cs.triton_available():
            raise RuntimeError("DLLM_KERNELS=triton but triton is not importable; pip install triton, "
                               "or set DLLM_KERNELS=torch (or auto)")
        if dev != "cuda" and not _cs.triton_interpreted():
            raise RuntimeError(f"DLLM_KERNELS=triton on {dev} tensors needs the Triton interpreter: set "
                               "TRITON_INTERPRET=1 before importing dllm, or set DLLM_KERNELS=torch (or auto)")
        return "triton"
    return "triton" if dev == "cuda" and _cs.triton_available() else "torch"


def confidence_stats(logits: Tensor, *, scratch: StatsScratch | None = None, **kwargs) -> TokenStats:
    """Per-row statistics of (R, V) logits through the selected backend.

    Keyword arguments and the returned fields are those of ``confidence_stats_torch``
    (temperature, seed, offset, counter, excluded_ids); ``scratch`` (the torch path's reused
    work buffers) is ignored by the Triton kernel, which needs none.
    """
    backend = kernel_backend(logits.device)
    CALL_COUNTS["confidence_stats"] += 1
    CALL_COUNTS[f"confidence_stats:{backend}"] += 1
    if backend == "triton":
        return _cs.confidence_stats_triton(logits, **kwargs)
    return _cs.confidence_stats_torch(logits, scratch=scratch, **kwargs)


__all__ = ["BACKENDS", "CALL_COUNTS", "StatsScratch", "TokenStats", "confidence_stats", "confidence_stats_torch", "kernel_backend"]
