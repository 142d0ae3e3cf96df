"""Kernels for the per-step work, each with a torch reference, behind one dispatch point.

``DLLM_KERNELS=auto`` (default): Triton for CUDA tensors when triton imports, the torch
reference otherwise. ``torch`` forces the reference; ``triton`` forces the kernel (on CPU only
with ``TRITON_INTERPRET=1``) and raises instead of falling back.
"""
from __future__ import annotations

import os
from collections import Counter

from torch import Tensor

from dllm.kernels.confidence_stats import TokenStats, confidence_stats_torch

CALL_COUNTS: Counter = Counter()
BACKENDS = ("auto", "torch", "triton")


def _triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def kernel_backend(device_type: str = "cuda") -> str:
    """The backend the dispatch picks for tensors of ``device_type``."""
    choice = os.environ.get("DLLM_KERNELS", "auto")
    if choice not in BACKENDS:
        raise ValueError(f"DLLM_KERNELS={choice!r}; use one of {BACKENDS}")
    if choice == "torch":
        return "torch"
    if choice == "triton":
        if not _triton_available():
            raise RuntimeError("DLLM_KERNELS=triton but triton is not installed; pip install triton or unset it")
        if device_type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError("DLLM_KERNELS=triton on CPU tensors needs TRITON_INTERPRET=1 (the Triton interpreter)")
        return "triton"
    return "triton" if device_type == "cuda" and _triton_available() else "torch"


def confidence_stats(logits: Tensor, **kwargs) -> TokenStats:
    """Per-row statistics of (R, V) logits; see ``confidence_stats_torch`` for the contract."""
    backend = kernel_backend(logits.device.type)
    CALL_COUNTS["confidence_stats"] += 1
    CALL_COUNTS[f"confidence_stats:{backend}"] += 1
    if backend == "triton":
        from dllm.kernels.confidence_stats_triton import confidence_stats_triton

        return confidence_stats_triton(logits, **kwargs)
    return confidence_stats_torch(logits, **kwargs)


__all__ = ["CALL_COUNTS", "TokenStats", "confidence_stats", "confidence_stats_torch", "kernel_backend"]
