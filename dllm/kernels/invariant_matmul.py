"""Batch-invariant linear: ``x @ w.T (+ bias)`` whose every row has the same bits at any row count.

cuBLAS picks its tiles, and whether to split the K reduction over several programs, from the
problem shape, so on a GPU a row's output moves by float rounding with the number of rows it is
multiplied with (issue 39). ``invariant_linear_triton`` fixes the schedule instead: one program
per (BLOCK_M rows, BLOCK_N columns) output tile, a float32 accumulator that walks K in BLOCK_K
steps from 0 to K, and tile sizes that depend on the dtype only, never on the row count. A row is
then the same dot products in the same order whether it is alone or row 17 of 33 (the technique
of Thinking Machines' ``batch_invariant_ops``: fixed tiles, no split-K).

``invariant_linear_torch`` is the reference (float32 accumulation through torch, rounded once to
the input dtype) and the CPU path; it is batch-invariant on the CPU only where the GEMM covers
enough rows (``dllm.kernels.grouped_matmul.MIN_GEMM_ROWS``), which the model's window forwards do.
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

# The schedule: fixed per dtype, never a function of the row count (that is the whole point).
BLOCK_M, BLOCK_N = 32, 64
BLOCK_K = {torch.float32: 32, torch.bfloat16: 64, torch.float16: 64}


def _check(x: Tensor, w: Tensor, bias: Tensor | None) -> None:
    if x.dim() < 1 or w.dim() != 2 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"invariant_linear expects x (..., K) and w (N, K), got {tuple(x.shape)} and {tuple(w.shape)}")
    if x.dtype != w.dtype or x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"invariant_linear: x and w must share a float dtype, got {x.dtype} and {w.dtype}")
    if bias is not None and (bias.shape != (w.shape[0],) or bias.dtype != x.dtype):
        raise ValueError(f"invariant_linear: bias must be ({w.shape[0]},) {x.dtype}, got {tuple(bias.shape)} {bias.dtype}")


def invariant_linear_torch(x: Tensor, w: Tensor, bias: Tensor | None = None) -> Tensor:
    """Reference: ``x @ w.T + bias`` accumulated in float32, rounded once to x's dtype."""
    _check(x, w, bias)
    y = x.float() @ w.float().T
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)


if triton is not None:

    @triton.jit
    def _invariant_linear_kernel(
        x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
        stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
        HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        IEEE: tl.constexpr,
    ):
        """One output tile per program, grid (ceil(M / BLOCK_M), ceil(N / BLOCK_N)); K walked
        from 0 in BLOCK_K steps into one float32 accumulator (no split-K)."""
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        ks = tl.arange(0, BLOCK_K)
        row_ok = rows < M
        col_ok = cols < N
        a_ptrs = x_ptr + rows[:, None].to(tl.int64) * stride_xm + ks[None, :] * stride_xk
        b_ptrs = w_ptr + cols[None, :].to(tl.int64) * stride_wn + ks[:, None] * stride_wk
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k_ok = (k0 + ks) < K
            a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
            if IEEE:
                acc = tl.dot(a, b, acc, input_precision="ieee")
            else:
                acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K * stride_xk
            b_ptrs += BLOCK_K * stride_wk
        if HAS_BIAS:
            acc += tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        y_ptrs = y_ptr + rows[:, None].to(tl.int64) * stride_ym + cols[None, :] * stride_yn
        tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])

else:
    _invariant_linear_kernel = None


def invariant_linear_triton(x: Tensor, w: Tensor, bias: Tensor | None = None) -> Tensor:
    """Launch ``_invariant_linear_kernel``; same contract as ``invariant_linear_torch``.

    float32 inputs multiply in IEEE precision (not TF32); tiles BLOCK_M x BLOCK_N x BLOCK_K[dtype]
    whatever the row count. x on CUDA, or on CPU under TRITON_INTERPRET=1."""
    require_kernel(_invariant_linear_kernel, "invariant_linear")
    _check(x, w, bias)
    require_launch_device(x.device)
    K, N = w.shape[1], w.shape[0]
    x2 = x.reshape(-1, K)  # (M, K): a view where the leading dims allow it
    M = x2.shape[0]
    y = x.new_empty(M, N)
    if M and N:
        grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
        _invariant_linear_kernel[grid](
            x2, w, y if bias is None else bias, y, M, N, K,
            x2.stride(0), x2.stride(1), w.stride(0), w.stride(1), y.stride(0), y.stride(1),
            HAS_BIAS=bias is not None, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K[x.dtype],
            IEEE=x.dtype == torch.float32, num_warps=4,
        )
    return y.view(*x.shape[:-1], N)


__all__ = ["BLOCK_K", "BLOCK_M", "BLOCK_N", "invariant_linear_torch", "invariant_linear_triton"]
