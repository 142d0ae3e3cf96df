"""Grouped matrix product for mixture-of-experts layers: every expert's rows in one call.

Rows of ``x`` (N, K) are sorted by expert; ``offsets`` (E + 1,) says where each expert's rows
start and end (offsets[0] = 0, offsets[E] = N, non-decreasing); ``w`` (E, N_out, K) holds one
``nn.Linear``-layout weight per expert. The product is y (N, N_out) with
``y[offsets[e]:offsets[e + 1]] = x[offsets[e]:offsets[e + 1]] @ w[e].T``.

Two implementations with one contract:

* ``grouped_matmul_torch``: the reference and the CPU path, one GEMM per expert that received
  rows (the offsets are read on the host once per call).
* ``grouped_matmul_triton``: ONE launch for all experts, no host read. The grid is an upper
  bound on the number of (row tile, column tile) pairs: sum_e ceil(n_e / BLOCK_M) is at most
  ceil(N / BLOCK_M) + E row tiles. Each program finds its expert from the offsets (a cumulative
  count of row tiles per expert, computed in the program over a vector of E entries) and exits
  at once when its tile index is past the last one. On CPU tensors it runs under the Triton
  interpreter (``TRITON_INTERPRET=1`` before dllm is imported), which is how tests check it.

Batch invariance (a row's bits do not depend on which other rows share its expert): each row is
a dot product over K in a fixed order in both. The reference widens any expert's slice to at
least ``MIN_GEMM_ROWS`` rows (the neighbours' rows are computed and dropped), because MKL's
float32 GEMM rounds differently below 12 rows (seen on one and two threads); the kernel's K
tiling never depends on N.
"""
from __future__ import annotations

import torch
from torch import Tensor

# the interpreter flag is global (TRITON_INTERPRET when dllm is imported): one check for every kernel
from dllm.kernels.confidence_stats import FLOAT_DTYPES, require_kernel, require_launch_device

try:
    import triton
    import triton.language as tl
except ImportError:  # the torch reference needs no triton
    triton = None
    tl = None

# A GEMM over fewer rows takes MKL's small-matrix path, whose float32 rounding differs (see the
# module docstring); every reference GEMM covers at least this many rows.
MIN_GEMM_ROWS = 16


def _check(x: Tensor, w: Tensor, offsets: Tensor) -> None:
    if x.dim() != 2 or w.dim() != 3:
        raise ValueError(f"grouped_matmul expects x (N, K) and w (E, N_out, K), got {tuple(x.shape)} and {tuple(w.shape)}")
    if x.shape[1] != w.shape[2]:
        raise ValueError(f"grouped_matmul: x has K={x.shape[1]} columns but w has K={w.shape[2]}")
    if offsets.shape != (w.shape[0] + 1,):
        raise ValueError(f"grouped_matmul: offsets must have shape ({w.shape[0] + 1},) for {w.shape[0]} experts, "
                         f"got {tuple(offsets.shape)}")
    if offsets.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"grouped_matmul: offsets must be int32 or int64, got {offsets.dtype}")
    if x.dtype != w.dtype or x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"grouped_matmul: x and w must share a float dtype, got {x.dtype} and {w.dtype}")


def grouped_matmul_torch(x: Tensor, w: Tensor, offsets: Tensor) -> Tensor:
    """Reference implementation and CPU path: one ``x_e @ w[e].T`` per expert with rows.

    Reads ``offsets`` on the host (one sync on a GPU). Each GEMM covers at least
    ``MIN_GEMM_ROWS`` rows (a short slice is widened over its neighbours, or over zero rows when
    x itself is shorter) so a row's bits do not depend on its expert's row count.
    """
    _check(x, w, offsets)
    N, N_out = x.shape[0], w.shape[1]
    y = x.new_empty(N, N_out)
    bounds = offsets.tolist()
    if bounds[0] != 0 or bounds[-1] != N or any(b > a for a, b in zip(bounds[1:], bounds)):
        raise ValueError(f"grouped_matmul: offsets must rise from 0 to N={N}, got {bounds}")
    src = x
    if 0 < N < MIN_GEMM_ROWS:
        src = torch.cat([x, x.new_zeros(MIN_GEMM_ROWS - N, x.shape[1])])
    rows = src.shape[0]
    for e in range(w.shape[0]):
        lo, hi = bounds[e], bounds[e + 1]
        if hi == lo:
            continue
        start = min(lo, rows - MIN_GEMM_ROWS) if hi - lo < MIN_GEMM_ROWS else lo
        stop = max(hi, start + MIN_GEMM_ROWS)
        y[lo:hi] = (src[start:stop] @ w[e].T)[lo - start:hi - start]
    return y


# The op reads the offsets on the host, which a CUDA graph cannot capture: tagged so that inductor's
# CUDA graphs (compile's mode="reduce-overhead") split the graph around it (graph partition) or
# skip graphs for that forward, instead of failing at capture. The tag is absent from older torch.
_HOST_READ_TAGS = (torch._C.Tag.cudagraph_unsafe,) if hasattr(torch._C.Tag, "cudagraph_unsafe") else ()


@torch.library.custom_op("dllm::grouped_matmul_torch", mutates_args=(), tags=_HOST_READ_TAGS)
def grouped_matmul_op(x: Tensor, w: Tensor, offsets: Tensor) -> Tensor:
    """``grouped_matmul_torch`` as one opaque operator for ``torch.compile``: its host read of the
    offsets would otherwise break the compiled forward's graph inside the layer loop (tagged
    ``cudagraph_unsafe``: see ``_HOST_READ_TAGS``)."""
    return grouped_matmul_torch(x, w, offsets)


@grouped_matmul_op.register_fake
def _grouped_matmul_shape(x: Tensor, w: Tensor, offsets: Tensor) -> Tensor:
    return x.new_empty(x.shape[0], w.shape[1])


if triton is not None:

    @triton.jit
    def _grouped_matmul_kernel(
        x_ptr, w_ptr, y_ptr, offsets_ptr,
        K, N_out, E,
        stride_xm, stride_xk, stride_we, stride_wn, stride_wk, stride_ym, stride_yn,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_E: tl.constexpr,
        IEEE: tl.constexpr,
    ):
        """One (row tile of one expert, column tile) per program; grid (ceil(N/BM) + E, ceil(N_out/BN))."""
        tile = tl.program_id(0)
        pid_n = tl.program_id(1)
        # which expert owns row tile ``tile``: tiles are numbered expert by expert
        experts = tl.arange(0, BLOCK_E)
        in_range = experts < E
        starts = tl.load(offsets_ptr + experts, mask=in_range, other=0).to(tl.int32)
        ends = tl.load(offsets_ptr + experts + 1, mask=in_range, other=0).to(tl.int32)
        n_tiles = (ends - starts + BLOCK_M - 1) // BLOCK_M
        tiles_through = tl.cumsum(n_tiles, axis=0)  # tiles of experts 0..e (inclusive)
        tiles_through = tl.where(in_range, tiles_through, 2147483647)
        e = tl.sum((tiles_through <= tile).to(tl.int32), axis=0)
        if e < E:
            this = experts == e
            first_tile = tl.sum(tl.where(this, tiles_through - n_tiles, 0), axis=0)
            row_lo = tl.sum(tl.where(this, starts, 0), axis=0)
            row_hi = tl.sum(tl.where(this, ends, 0), axis=0)
            rows = row_lo + (tile - first_tile) * BLOCK_M + tl.arange(0, BLOCK_M)
            cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            row_ok = rows < row_hi
            col_ok = cols < N_out
            ks = tl.arange(0, BLOCK_K)
            a_ptrs = x_ptr + rows[:, None].to(tl.int64) * stride_xm + ks[None, :] * stride_xk
            b_ptrs = (w_ptr + e.to(tl.int64) * stride_we + cols[None, :].to(tl.int64) * stride_wn
                      + ks[:, None] * stride_wk)
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
            y_ptrs = y_ptr + rows[:, None].to(tl.int64) * stride_ym + cols[None, :] * stride_yn
            tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])

else:
    _grouped_matmul_kernel = None


def triton_available() -> bool:
    """Whether triton imported (the kernel exists)."""
    return _grouped_matmul_kernel is not None


def grouped_matmul_triton(x: Tensor, w: Tensor, offsets: Tensor, *, block_m: int | None = None,
                          block_n: int | None = None, block_k: int | None = None) -> Tensor:
    """Launch ``_grouped_matmul_kernel`` once for every expert; same contract as the reference.

    Accumulates in float32 (float32 inputs in IEEE precision, not TF32, so the result matches
    torch's default float32 matmul to float rounding). ``offsets`` is not checked against N
    (that would read the device). Block sizes: the row tile follows the mean rows per expert
    (16 at decode sizes), the K tile is fixed per dtype so a row's summation order never
    depends on the batch.
    """
    require_kernel(_grouped_matmul_kernel, "grouped_matmul")
    _check(x, w, offsets)
    require_launch_device(x.device)
    N, K = x.shape
    E, N_out = w.shape[0], w.shape[1]
    y = x.new_empty(N, N_out)
    if N == 0 or N_out == 0:
        return y
    if K == 0:
        return y.zero_()
    mean_rows = max(1, N // E)
    bm = block_m or (16 if mean_rows <= 16 else 32 if mean_rows <= 32 else 64)
    bn = block_n or (64 if N_out >= 64 else max(16, triton.next_power_of_2(N_out)))
    bk = block_k or (32 if x.dtype == torch.float32 else 64)
    grid = (triton.cdiv(N, bm) + E, triton.cdiv(N_out, bn))
    _grouped_matmul_kernel[grid](
        x, w, y, offsets, K, N_out, E,
        x.stride(0), x.stride(1), w.stride(0), w.stride(1), w.stride(2), y.stride(0), y.stride(1),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, BLOCK_E=max(16, triton.next_power_of_2(E)),
        IEEE=x.dtype == torch.float32, num_warps=4,
    )
    return y
