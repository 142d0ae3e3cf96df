"""Batch-invariant log-softmax: one program per row, the row's log-sum-exp in one fixed order.

Log-probabilities of (R, V) logits in float32, ``x.float().log_softmax(-1)``. On a GPU torch's
reductions choose how a row is split over threads and blocks from the tensor's shape, so a row's
log Z can move with the number of rows (issue 39). The kernel gives each row one program that
walks the vocabulary in BLOCK_V chunks, keeping a per-lane running max and rescaled sum (the
online softmax), merges the lanes at the end and writes x - log Z: the same order whatever the
batch. The per-step statistics (``confidence_stats``) already run one program per row.
``log_softmax_torch`` is the reference and the CPU path.
"""
from __future__ import annotations

import torch
from torch import Tensor

from dllm.kernels.confidence_stats import FLOAT_DTYPES, require_kernel, require_launch_device

try:
    import triton
    import triton.language as tl
except ImportError:  # the torch reference needs no triton
    triton = None
    tl = None

MAX_BLOCK_V = 4096  # the chunk a row is read in: a function of V only


def _check(x: Tensor) -> None:
    if x.dim() < 1 or x.shape[-1] == 0 or x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"log_softmax expects (..., V) float logits with V > 0, got {tuple(x.shape)} {x.dtype}")


def log_softmax_torch(x: Tensor) -> Tensor:
    """Reference: float32 log-probabilities over the last dimension."""
    _check(x)
    return x.float().log_softmax(-1)


if triton is not None:

    @triton.jit
    def _log_softmax_kernel(x_ptr, y_ptr, V, stride_x, stride_y, BLOCK_V: tl.constexpr):
        """One row per program: per-lane online max / sum over BLOCK_V chunks, lanes merged, then
        x - log Z written in float32."""
        row = tl.program_id(0).to(tl.int64)
        lane = tl.arange(0, BLOCK_V)
        neg_inf = float("-inf")
        m = tl.full((BLOCK_V,), neg_inf, tl.float32)
        s = tl.zeros((BLOCK_V,), dtype=tl.float32)
        for start in range(0, V, BLOCK_V):
            cols = start + lane
            x = tl.load(x_ptr + row * stride_x + cols, mask=cols < V, other=neg_inf).to(tl.float32)
            m_new = tl.maximum(m, x)
            live = m_new > neg_inf  # a lane that has seen only -inf keeps s = 0
            s = tl.where(live, s * tl.exp(m - m_new) + tl.exp(x - m_new), 0.0)
            m = m_new
        m_row = tl.max(m, axis=0)
        s_row = tl.sum(tl.where(m > neg_inf, s * tl.exp(m - m_row), 0.0), axis=0)
        log_z = m_row + tl.log(s_row)
        for start in range(0, V, BLOCK_V):
            cols = start + lane
            ok = cols < V
            x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
            tl.store(y_ptr + row * stride_y + cols, x - log_z, mask=ok)

else:
    _log_softmax_kernel = None


def log_softmax_triton(x: Tensor) -> Tensor:
    """Launch ``_log_softmax_kernel``; same contract as ``log_softmax_torch``. x on CUDA, or on
    CPU under TRITON_INTERPRET=1."""
    require_kernel(_log_softmax_kernel, "log_softmax")
    _check(x)
    require_launch_device(x.device)
    V = x.shape[-1]
    x2 = x.reshape(-1, V)
    if x2.stride(1) != 1:
        x2 = x2.contiguous()
    y = torch.empty(x2.shape, dtype=torch.float32, device=x.device)
    if x2.shape[0]:
        _log_softmax_kernel[(x2.shape[0],)](x2, y, V, x2.stride(0), y.stride(0),
                                            BLOCK_V=min(MAX_BLOCK_V, triton.next_power_of_2(V)), num_warps=4)
    return y.view(*x.shape[:-1], V)


__all__ = ["log_softmax_torch", "log_softmax_triton"]
