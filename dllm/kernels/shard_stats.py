"""Per-step statistics of vocabulary-sharded logits, without gathering the logits.

A tensor-parallel rank holds the logits of vocabulary ids [lo, lo + V_r). ``shard_stats_torch``
reduces its (R, V_r) shard to 8 float32 numbers a row (``PARTIAL_FIELDS``); the ranks
all-gather them ((size, R, 8): 32 bytes a row per rank, against 4 V bytes a row for the logits)
and ``combine_shard_stats_torch`` turns them into the ``TokenStats`` that
``confidence_stats`` computes from the whole (R, V) logits:

* max M = max_r m_r; the argmax is the first rank's (ranks hold increasing ids) first index,
  as ``argmax`` over the whole row;
* s = sum_r s_r exp(m_r - M) (s_r = sum exp(x - m_r) over the shard), log Z = M + log s;
* entropy = log s - t / s with t = sum_r exp(m_r - M) (t_r + (m_r - M) s_r),
  t_r = sum exp(x - m_r) (x - m_r): the online-softmax merge of the Triton kernel, across ranks;
* top-2: the larger of the runner-up ranks' maxima and the winning rank's own second logit;
* sampling (temperature T > 0): every rank forms ``(x - M) + T * g`` as one process does, with
  the global M (all-reduced before, ``TensorShard.statistics``) and the noise g keyed by the
  global vocabulary id, so the noised scores are bit for bit one process's, the best one wins
  (lowest id on ties) and the tokens are the same at every tensor-parallel size.

Exact up to float rounding of the sums (prob / margins / entropy), exact for the tokens. Two
implementations of the partials with one contract, as ``confidence_stats``: ``shard_stats_torch``
(the reference and the CPU path) and ``shard_stats_triton``, the confidence_stats kernel's one
pass a row with a column offset and these outputs (on CPU under ``TRITON_INTERPRET=1``). The
combine is torch only: it reads (size, R, 8) numbers.
"""
from __future__ import annotations

import torch
from torch import Tensor

from dllm.kernels import confidence_stats as _cs
from dllm.kernels.confidence_stats import (FLOAT_DTYPES, TokenStats, hash_uniform_torch, noise_keys,
                                           tl, triton)

PARTIAL_FIELDS = ("max", "argmax_id", "second", "sum_exp", "sum_exp_x", "best_score", "best_id", "best_logit")
_FMIN = torch.finfo(torch.float32).min


def shard_stats_torch(logits: Tensor, *, vocab_start: int, temperature: float = 0.0, seed=None, offset: int = 0,
                      counter: Tensor | None = None, excluded_ids: Tensor | None = None,
                      global_max: Tensor | None = None) -> Tensor:
    """(R, V_r) shard logits of ids [vocab_start, vocab_start + V_r) -> (R, 8) float32 partials.

    ``excluded_ids``: global ids (those in the shard are set to -inf). At temperature > 0,
    ``global_max`` (R,): the max over the whole row after exclusion (required), and ``seed`` /
    ``counter`` / ``offset`` as ``confidence_stats_torch``; the noise of column c is keyed by
    the global id vocab_start + c. Ids travel as float32 (exact below 2**24)."""
    if logits.dim() != 2 or logits.dtype not in FLOAT_DTYPES:
        raise ValueError(f"shard_stats expects (rows, vocab) float logits, got {tuple(logits.shape)} {logits.dtype}")
    R, V = logits.shape
    device = logits.device
    y = logits.float().clone()
    if excluded_ids is not None and excluded_ids.numel():
        ex = excluded_ids.to(device, torch.int64).reshape(-1) - vocab_start
        ex = ex[(ex >= 0) & (ex < V)]
        if ex.numel():
            y.index_fill_(1, ex, float("-inf"))
    x = y.clone() if temperature > 0 else None
    m = y.amax(-1)  # (R,)
    top = y.argmax(-1)  # first index of the max
    shift = torch.where(m > float("-inf"), m, 0.0)  # an all -inf shard: s = t = 0
    y.sub_(shift[:, None])
    e = y.exp()
    s = e.sum(-1)
    t = e.mul_(y.clamp(min=_FMIN)).sum(-1)
    second = y.scatter(1, top[:, None], float("-inf")).amax(-1) + shift
    if temperature > 0:
        if global_max is None:
            raise ValueError("shard_stats at temperature > 0 needs the rows' global max (global_max)")
        seeds, counters = noise_keys(R, device, seed, temperature, offset, counter)
        cols = torch.arange(vocab_start, vocab_start + V, device=device, dtype=torch.int64)[None, :]
        u = hash_uniform_torch(seeds[:, None], counters[:, None], cols)
        score = (x - global_max.to(device, torch.float32)[:, None]) + temperature * -torch.log(-torch.log(u))
        best = score.argmax(-1)
        best_score = score.gather(1, best[:, None])[:, 0]
        best_logit = x.gather(1, best[:, None])[:, 0]
    else:
        best, best_score, best_logit = top, m, m
    return torch.stack([m, (top + vocab_start).float(), second, s, t, best_score, (best + vocab_start).float(),
                        best_logit], dim=-1)


def combine_shard_stats_torch(parts: Tensor) -> TokenStats:
    """(size, R, 8) gathered partials, in rank (= vocabulary) order -> TokenStats (R,)."""
    if parts.dim() != 3 or parts.shape[-1] != len(PARTIAL_FIELDS):
        raise ValueError(f"combine_shard_stats expects (ranks, rows, {len(PARTIAL_FIELDS)}) partials, "
                         f"got {tuple(parts.shape)}")
    m, top, second, s, t, score, best, best_logit = parts.float().unbind(-1)  # each (size, R)
    M = m.amax(0)  # (R,)
    win = (m == M).float().argmax(0)  # first rank holding the max (the lowest id)
    live = m > float("-inf")
    d = torch.where(live, m - M, 0.0)
    scale = torch.where(live, d.exp(), 0.0)
    S = (s * scale).sum(0)
    T = (scale * (t + d * s)).sum(0)
    entropy = S.log() - T / S
    others = m.scatter(0, win[None], float("-inf")).amax(0)
    second_all = torch.maximum(others, second.gather(0, win[None])[0])
    pick = score.argmax(0)  # the best (noised) score; first rank on ties
    token = best.gather(0, pick[None])[0].long()
    prob = (best_logit.gather(0, pick[None])[0] - M).exp() / S
    gap = second_all - M
    return TokenStats(token, prob, (1.0 - gap.exp()) / S, -gap, entropy)


# ---------------------------------------------------------------------------------------------
# Triton kernel
# ---------------------------------------------------------------------------------------------

if triton is not None:
    _hash_uniform, _row_key, _softmax_chunk = _cs._hash_uniform, _cs._row_key, _cs._softmax_chunk
    _load_chunk, _merge_best = _cs._load_chunk, _cs._merge_best

    @triton.jit
    def _shard_stats_kernel(
        logits_ptr, stride_row, V, vocab_start, excluded_ptr, temperature, gmax_ptr, seed_ptr, counter_ptr,
        out_ptr, BLOCK_V: tl.constexpr, N_EX: tl.constexpr, NOISE: tl.constexpr,
    ):
        """One program per row, one pass over the shard in BLOCK_V chunks: the online softmax of
        ``_confidence_stats_kernel`` (m, second, s, t), the first index of the max, and at
        temperature > 0 the first index of the max of (x - global max) + T * g, g keyed by the
        global id vocab_start + col. Excluded ids arrive shard-local (any value: out of range
        never matches)."""
        row = tl.program_id(0)
        base = logits_ptr + row.to(tl.int64) * stride_row
        neg_inf = float("-inf")
        lane = tl.arange(0, BLOCK_V)
        if NOISE:
            key = _row_key(seed_ptr, counter_ptr, row)
            gmax = tl.load(gmax_ptr + row)
        m = tl.full([], neg_inf, tl.float32)
        second = tl.full([], neg_inf, tl.float32)
        s = tl.full([], 0.0, tl.float32)
        t = tl.full([], 0.0, tl.float32)
        top_idx = tl.full([], 0, tl.int32)
        best_score = tl.full([], neg_inf, tl.float32)
        best_idx = tl.full([], 0, tl.int32)
        for start in range(0, V, BLOCK_V):
            cols = start + lane
            x = _load_chunk(base, cols, V, excluded_ptr, N_EX)
            m_old = m
            m, second, s, t, c_max, c_arg, finite = _softmax_chunk(x, lane, m, second, s, t)
            top_idx = tl.where(c_max > m_old, start + c_arg, top_idx)  # strict: earlier chunks win ties
            if NOISE:
                g = -tl.log(-tl.log(_hash_uniform(key, vocab_start + cols)))
                score = tl.where(finite, (x - gmax) + temperature * g, neg_inf)
                k_val, k_arg = tl.max(score, axis=0, return_indices=True, return_indices_tie_break_left=True)
                best_score, best_idx = _merge_best(k_val, k_arg, start, best_score, best_idx)
        out = out_ptr + row.to(tl.int64) * 8
        tl.store(out + 0, m)
        tl.store(out + 1, (top_idx + vocab_start).to(tl.float32))
        tl.store(out + 2, second)
        tl.store(out + 3, s)
        tl.store(out + 4, t)
        if NOISE:
            x_best = tl.load(base + best_idx).to(tl.float32)
            for j in tl.static_range(N_EX):
                x_best = tl.where(best_idx == tl.load(excluded_ptr + j), neg_inf, x_best)
            tl.store(out + 5, best_score)
            tl.store(out + 6, (best_idx + vocab_start).to(tl.float32))
            tl.store(out + 7, x_best)
        else:
            tl.store(out + 5, m)
            tl.store(out + 6, (top_idx + vocab_start).to(tl.float32))
            tl.store(out + 7, m)

else:
    _shard_stats_kernel = None


def shard_stats_triton(logits: Tensor, *, vocab_start: int, temperature: float = 0.0, seed=None, offset: int = 0,
                       counter: Tensor | None = None, excluded_ids: Tensor | None = None,
                       global_max: Tensor | None = None, block_v: int | None = None) -> Tensor:
    """Launch ``_shard_stats_kernel``; same contract as ``shard_stats_torch``.

    logits on CUDA (or on CPU under TRITON_INTERPRET=1), as ``confidence_stats_triton``;
    excluded_ids: at most MAX_EXCLUDED global ids (those outside the shard are ignored)."""
    if logits.dim() != 2 or logits.dtype not in FLOAT_DTYPES:
        raise ValueError(f"shard_stats expects (rows, vocab) float logits, got {tuple(logits.shape)} {logits.dtype}")
    _cs.require_kernel(_shard_stats_kernel, "shard_stats")
    logits, ex, n_ex, interpreted = _cs.kernel_inputs("shard_stats", logits, excluded_ids, vocab_start)
    R, V = logits.shape
    dev = logits.device
    out = torch.empty(R, len(PARTIAL_FIELDS), dtype=torch.float32, device=dev)
    if R == 0:
        return out
    noise = temperature > 0
    if noise:
        if global_max is None:
            raise ValueError("shard_stats at temperature > 0 needs the rows' global max (global_max)")
        seeds, counters = noise_keys(R, dev, seed, temperature, offset, counter)
        gmax = global_max.to(dev, torch.float32).reshape(R).contiguous()
    else:
        seeds = counters = gmax = out  # never read (NOISE = False)
    block = block_v or _cs._default_block_v(V, interpreted)
    # enable_fp_fusion=False: (x - M) + T * g rounded as torch rounds it, as confidence_stats_triton
    _shard_stats_kernel[(R,)](
        logits, logits.stride(0), V, int(vocab_start), ex, float(temperature), gmax, seeds, counters, out,
        BLOCK_V=block, N_EX=n_ex, NOISE=noise, num_warps=8 if block >= 2048 else 4, enable_fp_fusion=False,
    )
    return out


__all__ = ["PARTIAL_FIELDS", "combine_shard_stats_torch", "shard_stats_torch", "shard_stats_triton"]
