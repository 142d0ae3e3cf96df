"""Batch-invariant RMSNorm: one program per row, its sum of squares in one fixed order.

``weight * (x32 * rsqrt(mean(x32 ** 2) + eps)).to(x.dtype)``, the order of
``dllm.models.layers.RMSNorm``; with ``cast_last=True`` Gemma's order
(``dllm.models.gemma.GemmaRMSNorm``): ``(x32 * rsqrt(...) * weight.float()).to(x.dtype)``, the
weight multiplied in float32 before the one cast. ``weight=None``: no weight (Gemma's value and
router norms), the normed row cast to x's dtype. On a GPU torch's mean picks how many threads and blocks share a
row from the tensor's shape, so a row's bits can move with the row count (issue 39). The kernel
gives each row one program that walks its D features in BLOCK_D chunks into a vector of float32
partial sums, then adds the lanes: the same order for a row alone or in any batch.
``rms_norm_torch`` is the reference and the CPU path.
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

MAX_BLOCK_D = 1024  # the chunk a row is read in: a function of D only


def _check(x: Tensor, weight: Tensor | None) -> None:
    if x.dim() < 1 or (weight is not None and weight.shape != (x.shape[-1],)):
        raise ValueError(f"rms_norm expects x (..., D) and weight (D,) or None, got {tuple(x.shape)} and "
                         f"{None if weight is None else tuple(weight.shape)}")
    if x.dtype not in FLOAT_DTYPES or (weight is not None and weight.dtype not in FLOAT_DTYPES):
        raise ValueError(f"rms_norm takes float tensors, got {x.dtype} and {None if weight is None else weight.dtype}")


def _out_dtype(x: Tensor, weight: Tensor | None, cast_last: bool) -> torch.dtype:
    """x's dtype, or (RMSNorm's order with a weight) x's and the weight's promoted."""
    return x.dtype if weight is None or cast_last else torch.promote_types(x.dtype, weight.dtype)


def rms_norm_torch(x: Tensor, weight: Tensor | None, eps: float, *, cast_last: bool = False) -> Tensor:
    """Reference: ``dllm.models.layers.RMSNorm``'s arithmetic, or with ``cast_last``
    ``dllm.models.gemma.GemmaRMSNorm``'s (``torch.pow(..., -0.5)`` as Gemma writes it)."""
    _check(x, weight)
    x32 = x.float()
    if cast_last:
        out = x32 * torch.pow(x32.pow(2).mean(-1, keepdim=True) + eps, -0.5)
        return (out if weight is None else out * weight.float()).to(x.dtype)
    normed = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return normed if weight is None else weight * normed


if triton is not None:

    @triton.jit
    def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, D, stride_x, stride_y, eps, BLOCK_D: tl.constexpr,
                         HAS_W: tl.constexpr, CAST_LAST: tl.constexpr):
        """One row per program: sum of squares over BLOCK_D chunks, then the scaled row (weight
        times the rounded row, or with CAST_LAST the float32 row times the weight, cast once)."""
        row = tl.program_id(0).to(tl.int64)
        lane = tl.arange(0, BLOCK_D)
        acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
        for start in range(0, D, BLOCK_D):
            cols = start + lane
            x = tl.load(x_ptr + row * stride_x + cols, mask=cols < D, other=0.0).to(tl.float32)
            acc += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / D + eps)
        for start in range(0, D, BLOCK_D):
            cols = start + lane
            ok = cols < D
            x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0)
            if CAST_LAST:  # Gemma: the weight in float32, one cast at the store
                y = x.to(tl.float32) * rstd
                if HAS_W:
                    y = y * tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
            else:
                y = (x.to(tl.float32) * rstd).to(x.dtype).to(tl.float32)  # rounded to x's dtype before the scale
                if HAS_W:
                    y = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32) * y
            tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=ok)

else:
    _rms_norm_kernel = None


def rms_norm_triton(x: Tensor, weight: Tensor | None, eps: float, *, cast_last: bool = False) -> Tensor:
    """Launch ``_rms_norm_kernel``; same contract as ``rms_norm_torch`` (output dtype: x's and
    weight's promoted, x's with ``cast_last`` or no weight). x on CUDA, or on CPU under
    TRITON_INTERPRET=1."""
    require_kernel(_rms_norm_kernel, "rms_norm")
    _check(x, weight)
    require_launch_device(x.device)
    D = x.shape[-1]
    x2 = x.reshape(-1, D)
    if D and x2.stride(1) != 1:
        x2 = x2.contiguous()
    y = torch.empty(x2.shape, dtype=_out_dtype(x, weight, cast_last), device=x.device)
    if x2.shape[0] and D:
        w = x2 if weight is None else weight.contiguous()  # never read without a weight (HAS_W = False)
        _rms_norm_kernel[(x2.shape[0],)](x2, w, y, D, x2.stride(0), y.stride(0), float(eps),
                                         BLOCK_D=min(MAX_BLOCK_D, triton.next_power_of_2(D)),
                                         HAS_W=weight is not None, CAST_LAST=bool(cast_last), num_warps=4)
    return y.view(*x.shape[:-1], D)


__all__ = ["rms_norm_torch", "rms_norm_triton"]
