"""Batch-invariant attention: a query's output does not depend on the batch or its padding.

SDPA's fused kernels on a GPU choose how to split the keys (flash-decoding's split count, the
tile sizes) from the problem shape, and a left-padded row's keys start at a different offset
inside a wider batch; either moves a row's bits with its batch (issue 39). The kernel fixes the
order: one program per (row, head, BLOCK_M queries), keys walked in BLOCK_N chunks from the row's
first valid key (not from key 0, so left padding never shifts the chunk boundaries) up to
``key_end``, an online softmax in float32 (running max, rescaled sum and output), no split of the
keys. A row alone and the same row left-padded in any batch see the same chunks in the same order.

Contract of both implementations, for one key prefix (``dllm.models.layers.attend`` calls it once
per block-causal span): q (B, H, T, D), k and v (B, H_kv, S, D) with H a multiple of H_kv (grouped
heads share a K/V head), valid (B, S) bool or None, keys [0, key_end) -> out (B, T, H, D) in q's
dtype, softmax ``scale`` (default 1 / sqrt(D); DiffusionGemma passes 1.0). Optional positional
rule (``Positions``, DiffusionGemma's causal encoder): query positions (B, T) and key positions
(B, S); a key is seen when valid and at or before the query's position and, with a ``window`` w,
after ``query position - w``. The keys are still walked from the row's first valid key in the
same fixed chunks: the rule only masks scores. A query that sees no key gets zeros from both
implementations (SDPA alone gives NaN there, and a NaN output would reach the row's later keys
through the values). ``invariant_attention_torch`` is SDPA with the equivalent mask (the
reference and the CPU path).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from dllm.kernels.confidence_stats import FLOAT_DTYPES, require_kernel, require_launch_device

try:
    import triton
    import triton.language as tl
except ImportError:  # the torch reference needs no triton
    triton = None
    tl = None

BLOCK_M, BLOCK_N = 16, 32  # fixed: never a function of the batch, the padding or the key count


@dataclass(frozen=True, slots=True)
class Positions:
    """The positional rule: ``query`` (B, T) and ``key`` (B, S) integer positions; a key is seen
    when ``key <= query`` and, with ``window``, ``key > query - window``."""

    query: Tensor
    key: Tensor
    window: int | None = None

    def allowed(self, key_end: int) -> Tensor:
        """(B, T, key_end) bool: what the rule lets each query see (validity not included)."""
        q, k = self.query[:, :, None], self.key[:, None, :key_end]
        seen = k <= q
        return seen if self.window is None else seen & (k > q - self.window)


def _check(q: Tensor, k: Tensor, v: Tensor, valid: Tensor | None, key_end: int,
           positions: Positions | None = None) -> None:
    if q.dim() != 4 or k.dim() != 4 or k.shape != v.shape:
        raise ValueError(f"invariant_attention expects q (B, H, T, D) and k, v (B, H_kv, S, D), got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, H, _, D = q.shape
    if k.shape[0] != B or k.shape[3] != D or H % k.shape[1]:
        raise ValueError(f"invariant_attention: k, v {tuple(k.shape)} do not fit q {tuple(q.shape)} "
                         "(same B and D, H a multiple of H_kv)")
    if q.dtype != k.dtype or q.dtype != v.dtype or q.dtype not in FLOAT_DTYPES:
        raise ValueError(f"invariant_attention: q, k, v must share a float dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if valid is not None and (valid.shape != (B, k.shape[2]) or valid.dtype != torch.bool):
        raise ValueError(f"invariant_attention: valid must be ({B}, {k.shape[2]}) bool, got "
                         f"{tuple(valid.shape)} {valid.dtype}")
    if not 0 < key_end <= k.shape[2]:
        raise ValueError(f"invariant_attention: key_end must be in [1, {k.shape[2]}], got {key_end}")
    if positions is not None:
        pq, pk = positions.query, positions.key
        if pq.shape != (B, q.shape[2]) or pk.shape != (B, k.shape[2]) or pq.is_floating_point() or \
                pk.is_floating_point() or pq.dtype == torch.bool or pk.dtype == torch.bool:
            raise ValueError(f"invariant_attention: positions must be integer query ({B}, {q.shape[2]}) and key "
                             f"({B}, {k.shape[2]}) tensors, got {pq.dtype} {tuple(pq.shape)} and "
                             f"{pk.dtype} {tuple(pk.shape)}")
        if positions.window is not None and (isinstance(positions.window, bool) or
                                             not isinstance(positions.window, int) or positions.window < 1):
            raise ValueError(f"invariant_attention: window must be a positive int or None, got {positions.window!r}")


def invariant_attention_torch(q: Tensor, k: Tensor, v: Tensor, valid: Tensor | None, key_end: int, *,
                              scale: float | None = None, positions: Positions | None = None) -> Tensor:
    """Reference: SDPA over keys [0, key_end) with the per-row key mask (and the positional rule's
    (B, T, key_end) mask) -> (B, T, H, D); zeros for a query that sees no key."""
    _check(q, k, v, valid, key_end, positions)
    mask = None if valid is None else valid[:, None, :key_end]  # (B, 1, key_end)
    if positions is not None:
        mask = positions.allowed(key_end) if mask is None else mask & positions.allowed(key_end)
    out = F.scaled_dot_product_attention(q, k[:, :, :key_end], v[:, :, :key_end],
                                         attn_mask=None if mask is None else mask[:, None], scale=scale,
                                         enable_gqa=k.shape[1] != q.shape[1])
    if mask is not None:  # SDPA's NaN (or zeros, by backend) for a query that sees nothing: zeros
        out = out.masked_fill(~mask.any(-1)[:, None, :, None], 0.0)
    return out.transpose(1, 2)


if triton is not None:

    @triton.jit
    def _invariant_attention_kernel(
        q_ptr, k_ptr, v_ptr, valid_ptr, start_ptr, qpos_ptr, kpos_ptr, out_ptr, H, T, key_end, n_rep, scale,
        window, sqb, sqh, sqt, skb, skh, sks, svb, svh, svs, sob, sot, soh, s_valid, s_qpos, s_kpos,
        D: tl.constexpr, HAS_VALID: tl.constexpr, HAS_POS: tl.constexpr, HAS_WINDOW: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, IEEE: tl.constexpr,
    ):
        """Grid (ceil(T / BLOCK_M), B * H): BLOCK_M queries of one row and head against every key
        of the row from its first valid one, BLOCK_N keys at a time, online softmax in float32;
        HAS_POS masks each score by the positional rule (the walk does not change)."""
        pid_m = tl.program_id(0)
        bh = tl.program_id(1)
        b = bh // H
        h = bh % H
        kvh = h // n_rep
        qs = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        ds = tl.arange(0, BLOCK_D)
        q_ok = qs < T
        d_ok = ds < D
        q = tl.load(q_ptr + b.to(tl.int64) * sqb + h * sqh + qs[:, None].to(tl.int64) * sqt + ds[None, :],
                    mask=q_ok[:, None] & d_ok[None, :], other=0.0)
        k_base = k_ptr + b.to(tl.int64) * skb + kvh * skh
        v_base = v_ptr + b.to(tl.int64) * svb + kvh * svh
        m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
        denom = tl.zeros((BLOCK_M,), dtype=tl.float32)
        acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        if HAS_POS:
            qpos = tl.load(qpos_ptr + b.to(tl.int64) * s_qpos + qs, mask=q_ok, other=0)
        first = tl.load(start_ptr + b)
        for n0 in range(first, key_end, BLOCK_N):
            ks = n0 + tl.arange(0, BLOCK_N)
            k_ok = ks < key_end
            if HAS_VALID:
                k_ok = k_ok & (tl.load(valid_ptr + b.to(tl.int64) * s_valid + ks, mask=k_ok, other=0) != 0)
            kt = tl.load(k_base + ks[None, :].to(tl.int64) * sks + ds[:, None], mask=k_ok[None, :] & d_ok[:, None],
                         other=0.0)  # (BLOCK_D, BLOCK_N)
            if IEEE:
                s = tl.dot(q, kt, input_precision="ieee")
            else:
                s = tl.dot(q, kt)
            seen = k_ok[None, :]
            if HAS_POS:
                kpos = tl.load(kpos_ptr + b.to(tl.int64) * s_kpos + ks, mask=k_ok, other=0)
                seen = seen & (kpos[None, :] <= qpos[:, None])
                if HAS_WINDOW:
                    seen = seen & (kpos[None, :] > qpos[:, None] - window)
            s = tl.where(seen, s * scale, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, axis=1))
            live = m_new > float("-inf")  # a query with no valid key yet keeps denom = acc = 0
            alpha = tl.where(live, tl.exp(m - m_new), 1.0)
            p = tl.where(live[:, None], tl.exp(s - m_new[:, None]), 0.0)
            denom = denom * alpha + tl.sum(p, axis=1)
            vv = tl.load(v_base + ks[:, None].to(tl.int64) * svs + ds[None, :], mask=k_ok[:, None] & d_ok[None, :],
                         other=0.0)  # (BLOCK_N, BLOCK_D)
            if IEEE:
                acc = acc * alpha[:, None] + tl.dot(p.to(vv.dtype), vv, input_precision="ieee")
            else:
                acc = acc * alpha[:, None] + tl.dot(p.to(vv.dtype), vv)
            m = m_new
        out = acc / tl.where(denom > 0, denom, 1.0)[:, None]
        tl.store(out_ptr + b.to(tl.int64) * sob + qs[:, None].to(tl.int64) * sot + h * soh + ds[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=q_ok[:, None] & d_ok[None, :])

else:
    _invariant_attention_kernel = None


def invariant_attention_triton(q: Tensor, k: Tensor, v: Tensor, valid: Tensor | None, key_end: int, *,
                               scale: float | None = None, positions: Positions | None = None) -> Tensor:
    """Launch ``_invariant_attention_kernel``; same contract as ``invariant_attention_torch``
    (a query that sees no key gets zeros). Needs unit stride on D; float32 products in IEEE
    precision. On CUDA, or on CPU under TRITON_INTERPRET=1."""
    require_kernel(_invariant_attention_kernel, "invariant_attention")
    _check(q, k, v, valid, key_end, positions)
    require_launch_device(q.device)
    q, k, v = (t if t.stride(3) == 1 else t.contiguous() for t in (q, k, v))
    B, H, T, D = q.shape
    out = q.new_empty(B, T, H, D)
    if T == 0:
        return out
    if valid is None:
        start = torch.zeros(B, dtype=torch.int32, device=q.device)
        flags = start  # never read (HAS_VALID = False)
    else:
        flags = valid.to(torch.int8).contiguous()
        start = valid.to(torch.int8).argmax(-1).to(torch.int32)  # first valid key (0 when none)
    if positions is None:
        qpos = kpos = start  # never read (HAS_POS = False)
    else:  # int64 positions: a window subtraction never wraps
        qpos, kpos = positions.query.to(torch.int64).contiguous(), positions.key.to(torch.int64).contiguous()
    window = positions.window if positions is not None and positions.window is not None else 0
    grid = (triton.cdiv(T, BLOCK_M), B * H)
    _invariant_attention_kernel[grid](
        q, k, v, flags, start, qpos, kpos, out, H, T, int(key_end), H // k.shape[1],
        1.0 / math.sqrt(D) if scale is None else float(scale), int(window),
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2), flags.stride(0),
        qpos.stride(0), kpos.stride(0),
        D=D, HAS_VALID=valid is not None, HAS_POS=positions is not None, HAS_WINDOW=bool(window),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
        BLOCK_D=max(16, triton.next_power_of_2(D)), IEEE=q.dtype == torch.float32, num_warps=4,
    )
    return out


__all__ = ["BLOCK_M", "BLOCK_N", "Positions", "invariant_attention_torch", "invariant_attention_triton"]
