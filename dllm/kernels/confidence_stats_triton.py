"""Triton kernel for ``confidence_stats``: one program per row, one pass over the vocabulary.

Online softmax (running max m, running sum s of exp(x - m)), running entropy numerator
sum exp(x - m) (x - m) rescaled when m grows, running top-2 logits, and the (noised) argmax
with its raw logit. The torch reference in confidence_stats.py is the specification.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from dllm.kernels.confidence_stats import TokenStats

MAX_EXCLUDED = 8


@triton.jit
def _hash_uniform(seed, row, cols):
    """lowbias32 of (seed, row, col) in int64 masked to 32 bits, as hash_uniform_torch."""
    M: tl.constexpr = 0xFFFFFFFF
    x = (row * 0x9E3779B1 + cols * 0x85EBCA77 + seed.to(tl.int64) * 0xC2B2AE3D) & M
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & M
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & M
    x = x ^ (x >> 16)
    return ((x >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)


@triton.jit
def _confidence_stats_kernel(
    logits_ptr, stride_row, V, excluded_ptr, n_excluded, temperature, seed, offset,
    token_ptr, prob_ptr, margin_prob_ptr, margin_logit_ptr, entropy_ptr,
    BLOCK_V: tl.constexpr, NOISE: tl.constexpr, MAX_EX: tl.constexpr,
):
    row = tl.program_id(0)
    base = logits_ptr + row.to(tl.int64) * stride_row
    ex_idx = tl.arange(0, MAX_EX)
    excluded = tl.load(excluded_ptr + ex_idx, mask=ex_idx < n_excluded, other=-1)
    neg_inf = float("-inf")
    m = tl.full([], neg_inf, tl.float32)
    s = tl.full([], 0.0, tl.float32)
    t = tl.full([], 0.0, tl.float32)  # sum exp(x - m) (x - m)
    best1 = tl.full([], neg_inf, tl.float32)
    best2 = tl.full([], neg_inf, tl.float32)
    best_score = tl.full([], neg_inf, tl.float32)
    best_x = tl.full([], neg_inf, tl.float32)
    best_idx = tl.full([], 0, tl.int64)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        inside = cols < V
        x = tl.load(base + cols, mask=inside, other=neg_inf).to(tl.float32)
        hit = tl.sum((cols[:, None] == excluded[None, :]).to(tl.int32), axis=1) > 0
        x = tl.where(hit, neg_inf, x)
        # online softmax + entropy numerator
        c_max = tl.max(x, axis=0)
        m_new = tl.maximum(m, c_max)
        alpha = tl.where(m_new == neg_inf, 1.0, tl.exp(m - m_new))
        d = tl.where(m == neg_inf, 0.0, m - m_new)
        t = alpha * (t + d * s)
        s = alpha * s
        finite = x > neg_inf
        u = tl.where(finite, x - m_new, 0.0)
        e = tl.where(finite, tl.exp(u), 0.0)
        s += tl.sum(e, axis=0)
        t += tl.sum(e * u, axis=0)
        m = m_new
        # top-2 raw logits
        c_arg = tl.argmax(x, axis=0)
        c2 = tl.max(tl.where(cols == start + c_arg, neg_inf, x), axis=0)
        new2 = tl.where(best1 >= c_max, tl.maximum(best2, c_max), tl.maximum(best1, c2))
        best1 = tl.maximum(best1, c_max)
        best2 = new2
        # chosen token: argmax of x (+ temperature * Gumbel noise), first index on ties
        if NOISE:
            g = -tl.log(-tl.log(_hash_uniform(seed, (offset + row).to(tl.int64), cols.to(tl.int64))))
            score = tl.where(finite, x + temperature * g, neg_inf)
        else:
            score = x
        k_arg = tl.argmax(score, axis=0)
        k_val = tl.max(score, axis=0)
        k_x = tl.sum(tl.where(tl.arange(0, BLOCK_V) == k_arg, x, 0.0), axis=0)
        better = k_val > best_score
        best_x = tl.where(better, k_x, best_x)
        best_idx = tl.where(better, (start + k_arg).to(tl.int64), best_idx)
        best_score = tl.where(better, k_val, best_score)
    tl.store(token_ptr + row, best_idx)
    tl.store(prob_ptr + row, tl.exp(best_x - m) / s)
    tl.store(margin_prob_ptr + row, (1.0 - tl.exp(best2 - best1)) / s)
    tl.store(margin_logit_ptr + row, best1 - best2)
    tl.store(entropy_ptr + row, tl.log(s) - t / s)


def confidence_stats_triton(logits: Tensor, *, temperature: float = 0.0, seed: int | None = None,
                            offset: int = 0, excluded_ids: Tensor | None = None,
                            block_v: int = 4096) -> TokenStats:
    """Launch the kernel on (R, V) logits (fp32 / bf16 / fp16, last dim contiguous)."""
    if logits.dim() != 2:
        raise ValueError(f"confidence_stats expects (rows, vocab) logits, got shape {tuple(logits.shape)}")
    if logits.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"unsupported logits dtype {logits.dtype}")
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    R, V = logits.shape
    dev = logits.device
    ex = torch.full((MAX_EXCLUDED,), -1, dtype=torch.int64, device=dev)
    n_ex = 0
    if excluded_ids is not None and excluded_ids.numel():
        if excluded_ids.numel() > MAX_EXCLUDED:
            raise ValueError(f"at most {MAX_EXCLUDED} excluded ids are supported, got {excluded_ids.numel()}")
        n_ex = excluded_ids.numel()
        ex[:n_ex] = excluded_ids.to(dev, torch.int64)
    token = torch.empty(R, dtype=torch.int64, device=dev)
    prob, margin_prob, margin_logit, entropy = (torch.empty(R, dtype=torch.float32, device=dev) for _ in range(4))
    block = min(block_v, triton.next_power_of_2(V))
    _confidence_stats_kernel[(R,)](
        logits, logits.stride(0), V, ex, n_ex, float(temperature), int(seed or 0), int(offset),
        token, prob, margin_prob, margin_logit, entropy,
        BLOCK_V=block, NOISE=temperature > 0, MAX_EX=MAX_EXCLUDED,
    )
    return TokenStats(token, prob, margin_prob, margin_logit, entropy)
