"""Fused per-row confidence statistics: the one pass over the logits every unmasking rule reads.

Per row of logits (R, V) it returns the chosen token (argmax at temperature 0, a Gumbel-max
sample at temperature T > 0), the token's probability under the un-tempered softmax, the top-1
minus top-2 margin in probability and in logit, and the entropy. No rule computes a softmax of
its own, so the (R, V) tensor is read once per decoding step.

Two implementations with one contract:

* ``confidence_stats_torch``: the reference and the CPU path.
* ``confidence_stats_triton``: one Triton program per row, a single pass over the vocabulary with
  an online softmax. On CPU tensors it runs under the Triton interpreter (``TRITON_INTERPRET=1``
  set before this module is imported), which is how the tests check it without a GPU.

Noise is counter-based, so both give the same tokens at T > 0 and a decode is reproducible from
(seed, counter) alone: u = hash(seed[row], counter[row], col), the same 32-bit integer hash
(``lowbias32``, uint32 arithmetic; emulated on int64 masked to 32 bits in torch) on both sides.
Seeds and counters are per row, so a caller can give every row its own stream (the engine keys
a row by its own seed, its own step count and the answer position: a row's noise never depends
on its batch); by default every row shares ``seed`` and counter = offset + row.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError:  # the torch reference needs no triton
    triton = None
    tl = None

_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF
# lowbias32 (Chris Wellons' hash-prospector): two multiply-xorshift rounds on uint32.
_LB_MUL1 = 0x7FEB352D
_LB_MUL2 = 0x846CA68B
# Odd constants that decorrelate the row counter and the column before hashing.
_ROW_SALT = 0x9E3779B9
_COL_MUL = 0x85EBCA6B
# u = ((h >> 9) + 0.5) / 2**23: 23 bits keep u exactly representable in float32 and strictly
# inside (0, 1), so -log(-log(u)) is finite (24 bits would round the top value up to 1.0).
_U_SHIFT = 9
_U_SCALE = 1.0 / 8388608.0
MAX_EXCLUDED = 8

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class TokenStats(NamedTuple):
    """Per-position statistics of one decoding step; every field has the same shape."""

    token: Tensor  # int64: argmax, or the Gumbel-max sample at temperature > 0
    prob: Tensor  # float32: un-tempered softmax probability of ``token``
    margin_prob: Tensor  # float32: top-1 minus top-2 probability
    margin_logit: Tensor  # float32: top-1 minus top-2 logit
    entropy: Tensor  # float32: -sum p log p in nats (0 log 0 = 0)

    def reshape(self, *shape: int) -> "TokenStats":
        """Every field reshaped alike, e.g. (N * W,) -> (N, W)."""
        return TokenStats(*(f.reshape(*shape) for f in self))

    def index(self, mask_or_idx) -> "TokenStats":
        """Every field indexed alike (boolean mask, index tensor, slice)."""
        return TokenStats(*(f[mask_or_idx] for f in self))


# ---------------------------------------------------------------------------------------------
# Counter-based noise, torch side (int64 carrying uint32 values)
# ---------------------------------------------------------------------------------------------


def fold_seed(seed: int) -> int:
    """Any Python int -> the 32-bit seed both implementations hash (high half xored in)."""
    s = int(seed) & _M64
    return (s ^ (s >> 32)) & _M32


def _mulmod32(x: Tensor, c: int) -> Tensor:
    """(x * c) mod 2**32 for x < 2**32 held in int64, split in 16-bit halves so no product
    overflows int64 (a plain x * c can exceed 2**63)."""
    lo = x * (c & 0xFFFF)
    hi = ((x * (c >> 16)) & 0xFFFF) << 16
    return (lo + hi) & _M32


def _lowbias32_torch(x: Tensor) -> Tensor:
    x = x ^ (x >> 16)
    x = _mulmod32(x, _LB_MUL1)
    x = x ^ (x >> 15)
    x = _mulmod32(x, _LB_MUL2)
    return x ^ (x >> 16)


def fold_seeds(seed: int | Tensor) -> int | Tensor:
    """``fold_seed`` for an int, or elementwise for an int64 tensor of non-negative seeds."""
    if isinstance(seed, Tensor):
        return (seed ^ (seed >> 32)) & _M32
    return fold_seed(seed)


def row_keys_torch(seed: int | Tensor, counters: Tensor) -> Tensor:
    """Per-row key: lowbias32(seed32 ^ lowbias32(c32 ^ salt)), c32 = lo ^ lowbias32(hi) of the
    non-negative int64 counter (lowbias32(0) = 0: counters below 2**32 hash as themselves, and
    the high half, e.g. a step index, is mixed before it meets the low half, a position).
    ``seed``: an int or an int64 tensor broadcastable to ``counters`` (non-negative)."""
    c32 = (counters & _M32) ^ _lowbias32_torch((counters >> 32) & _M32)
    return _lowbias32_torch(fold_seeds(seed) ^ _lowbias32_torch(c32 ^ _ROW_SALT))


def hash_uniform_torch(seed: int | Tensor, counters: Tensor, cols: Tensor) -> Tensor:
    """Uniform noise in (0, 1): counters (R, 1) and cols (1, V) int64 -> (R, V) float32
    (any broadcastable shapes; ``seed`` an int or an int64 tensor broadcastable to counters).

    bits = lowbias32(row_key ^ (col * _COL_MUL mod 2**32)); u = ((bits >> 9) + 0.5) / 2**23.
    Bit-identical to ``_hash_uniform`` in the kernel.
    """
    bits = _lowbias32_torch(row_keys_torch(seed, counters) ^ _mulmod32(cols & _M32, _COL_MUL))
    return ((bits >> _U_SHIFT).to(torch.float32) + 0.5) * _U_SCALE


def noise_keys(R: int, device, seed: int | Tensor | None, temperature: float, offset: int = 0,
               counter: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(R,) folded seeds and (R,) counters of the rows of one call: ``seed`` per row (an (R,)
    int64 tensor of non-negative seeds) or shared (an int), ``counter`` per row or else
    offset + row."""
    if isinstance(seed, Tensor):
        if seed.shape != (R,):
            raise ValueError(f"per-row seeds must have shape ({R},), got {tuple(seed.shape)}")
        seeds = fold_seeds(seed.to(device, torch.int64))
    else:
        seeds = torch.full((R,), fold_seed(_resolve_seed(seed, temperature)), dtype=torch.int64, device=device)
    if counter is None:
        counter = torch.arange(offset, offset + R, dtype=torch.int64, device=device)
    elif counter.shape != (R,):
        raise ValueError(f"per-row counters must have shape ({R},), got {tuple(counter.shape)}")
    return seeds, counter.to(device, torch.int64)


def _resolve_seed(seed: int | None, temperature: float) -> int:
    """An explicit seed, or (temperature > 0 without one) a draw from torch's global generator."""
    if seed is not None:
        return int(seed)
    if temperature > 0:
        return int(torch.randint(0, 2**62, (1,)).item())
    return 0


# ---------------------------------------------------------------------------------------------
# Reference
# ---------------------------------------------------------------------------------------------


class StatsScratch:
    """The torch path's two (R, V) float32 work buffers, kept between calls: one decode's steps
    reuse them instead of allocating (and page-faulting in) two fresh tensors per step. Grows
    to the largest (R, V) asked for; owned by one caller (not shared between threads)."""

    def __init__(self) -> None:
        self._flat: Tensor | None = None
        self._weight: Tensor | None = None

    def weight(self, V: int, device: torch.device) -> Tensor:
        """``_first_max_index``'s (V,) column weights, made once per vocabulary size."""
        if self._weight is None or self._weight.shape[0] != V or self._weight.device != device:
            self._weight = _column_weight(V, device)
        return self._weight

    def buffers(self, R: int, V: int, device: torch.device) -> tuple[Tensor, Tensor]:
        n = R * V
        if self._flat is None or self._flat.shape[1] < n or self._flat.device != device:
            self._flat = torch.empty(2, n, device=device)
        return self._flat[0, :n].view(R, V), self._flat[1, :n].view(R, V)


def confidence_stats_torch(logits: Tensor, *, temperature: float = 0.0, seed: int | Tensor | None = None,
                           offset: int = 0, counter: Tensor | None = None,
                           excluded_ids: Tensor | None = None,
                           scratch: StatsScratch | None = None) -> TokenStats:
    """Reference implementation and CPU path.

    logits: (R, V) float32 / bfloat16 / float16; computed in float32 whatever the input dtype.
    Entries may be -inf (e.g. after top-k / top-p filtering); ``excluded_ids`` (e.g. the mask
    token, ids in [0, V)) are set to -inf, so they are never chosen and count nowhere. A row whose
    every remaining entry is -inf is invalid input (its statistics are undefined).

    token: ``argmax(logits)`` (first index on ties) at temperature 0, else the Gumbel-max sample
    ``argmax(logits + T * g)`` with g = -log(-log(u)), u = hash(seed, counter, col); a sample
    from softmax(logits / T). ``seed``: one int for every row, or an (R,) int64 tensor of
    non-negative per-row seeds; ``None`` at T > 0 draws one from torch's global generator.
    ``counter``: (R,) non-negative int64 per-row counters; default offset + row.
    prob, margin_prob and entropy are those of the un-tempered softmax(logits).
    ``scratch``: buffers reused across calls (e.g. one decode's steps); None allocates.
    """
    if logits.dim() != 2:
        raise ValueError(f"confidence_stats expects (rows, vocab) logits, got shape {tuple(logits.shape)}")
    if logits.dtype not in FLOAT_DTYPES:
        raise ValueError(f"confidence_stats expects float32/bfloat16/float16 logits, got {logits.dtype}")
    R, V = logits.shape
    # y: a float32 working copy (the caller's logits stay untouched), shifted so that its max is 0.
    # y and e are the only (R, V) tensors and every pass runs in place or reduces: on a CPU each
    # fresh (R, V) temporary costs page faults about as much as its arithmetic (``scratch``
    # reuses the two buffers across calls), and the index-returning reductions (argmax, topk)
    # cost ~10x a plain one, so the first max is found by a weighted plain max.
    device = logits.device
    if scratch is None:
        y, e = (torch.empty(R, V, device=device) for _ in range(2))
    else:
        y, e = scratch.buffers(R, V, device)
    y.copy_(logits)
    if excluded_ids is not None and excluded_ids.numel():
        y.index_fill_(1, excluded_ids.to(device, torch.int64).reshape(-1), float("-inf"))
    y.sub_(y.amax(-1, keepdim=True))  # y = x - max <= 0, exactly 0 at every max
    torch.exp(y, out=e)  # unnormalised probabilities: p = e / s, log p = y - log s
    s = e.sum(-1)  # (R,)
    if temperature > 0:
        seeds, counters = noise_keys(R, device, seed, temperature, offset, counter)
        cols = torch.arange(V, device=device, dtype=torch.int64)[None, :]  # (1, V)
        u = hash_uniform_torch(seeds[:, None], counters[:, None], cols)  # (R, V)
        gumbel = -torch.log(-torch.log(u))
        token = (y + temperature * gumbel).argmax(-1)  # the shift does not move a row's argmax
    # entropy = log s - sum(e * y) / s; -inf entries (e = 0) clamped so that 0 * y = 0
    finite_min = torch.finfo(torch.float32).min
    y.clamp_(min=finite_min)
    entropy = s.log() - e.mul_(y).sum(-1) / s
    weight = _column_weight(V, device) if scratch is None else scratch.weight(V, device)
    top1 = _first_max_index(y, scratch=e, weight=weight)  # e is spent: its buffer holds the weights
    if temperature == 0:
        token = top1
    prob = y.gather(-1, token[:, None])[:, 0].exp() / s
    # top-2 logit (relative to the max): the max over everything but the first max
    second = y.scatter_(1, top1[:, None], float("-inf")).amax(-1)
    second = torch.where(second <= finite_min, float("-inf"), second)  # no second finite entry
    return TokenStats(token, prob, (1.0 - second.exp()) / s, -second, entropy)


def _column_weight(V: int, device: torch.device) -> Tensor:
    """(V,) float32 V - col: V, V - 1, ..., 1."""
    return torch.arange(V, 0, -1, device=device, dtype=torch.float32)


def _first_max_index(y: Tensor, scratch: Tensor, weight: Tensor) -> Tensor:
    """(R,) first column where each row of ``y`` (entries <= 0, max 0) is 0, without argmax:
    1 + sign(y) is 1 exactly at the maxima and 0 elsewhere; weighted by ``weight`` (V - col,
    ``_column_weight``), the row's max names the first one (V < 2**24: exact in float32).
    ``scratch``: an (R, V) float32 buffer."""
    V = y.shape[-1]
    at_max = torch.sign(y, out=scratch).add_(1.0).mul_(weight)
    return (V - at_max.amax(-1)).long()


# ---------------------------------------------------------------------------------------------
# Triton kernel
# ---------------------------------------------------------------------------------------------

if triton is not None:

    @triton.jit
    def _lowbias32(x):
        """lowbias32 on uint32 (wrap-around multiply, logical shifts): as ``_lowbias32_torch``."""
        x = x ^ (x >> 16)
        x = x * 0x7FEB352D
        x = x ^ (x >> 15)
        x = x * 0x846CA68B
        return x ^ (x >> 16)

    @triton.jit
    def _hash_uniform(key, cols):
        """Uniform (0, 1) float32 for one row's key (uint32) and int32 column indices."""
        bits = _lowbias32(key ^ (cols.to(tl.uint32) * 0x85EBCA6B))
        return ((bits >> 9).to(tl.float32) + 0.5) * (1.0 / 8388608.0)

    @triton.jit
    def _row_key(seed_ptr, counter_ptr, row):
        """A row's noise key from its seed (folded to 32 bits) and counter, as ``row_keys_torch``."""
        c = tl.load(counter_ptr + row)
        hi = ((c >> 32) & 0xFFFFFFFF).to(tl.uint32)
        c32 = (c & 0xFFFFFFFF).to(tl.uint32) ^ _lowbias32(hi)
        seed_u = (tl.load(seed_ptr + row) & 0xFFFFFFFF).to(tl.uint32)
        return _lowbias32(seed_u ^ _lowbias32(c32 ^ 0x9E3779B9))

    @triton.jit
    def _load_chunk(base, cols, V, excluded_ptr, N_EX: tl.constexpr):
        """A chunk of one row as float32, -inf past V and at the N_EX excluded columns."""
        x = tl.load(base + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        for j in tl.static_range(N_EX):
            x = tl.where(cols == tl.load(excluded_ptr + j), float("-inf"), x)
        return x

    @triton.jit
    def _merge_best(k_val, k_arg, start, best_score, best_idx):
        """The running (best score, its column) merged with a chunk's best (its value and lane);
        strict '>' so that earlier chunks win ties (the first index, as argmax)."""
        better = k_val > best_score
        return tl.where(better, k_val, best_score), tl.where(better, start + k_arg, best_idx)

    @triton.jit
    def _softmax_chunk(x, lane, m, second, s, t):
        """One chunk of the online softmax: the running (m, second, s, t) updated by the chunk
        x (see ``_confidence_stats_kernel``), the chunk's max and its first lane, and the mask of
        its finite entries."""
        neg_inf = float("-inf")
        c_max, c_arg = tl.max(x, axis=0, return_indices=True, return_indices_tie_break_left=True)
        c_second = tl.max(tl.where(lane == c_arg, neg_inf, x), axis=0)
        # (m_ref: m_new, or 0 while the row has seen only -inf, so no -inf - -inf is formed)
        m_new = tl.maximum(m, c_max)
        m_ref = tl.where(m_new == neg_inf, 0.0, m_new)
        alpha = tl.exp(m - m_ref)
        shift = tl.where(m == neg_inf, 0.0, m - m_ref)
        t = alpha * (t + shift * s)
        s = alpha * s
        finite = x > neg_inf
        d = tl.where(finite, x - m_ref, 0.0)
        e = tl.where(finite, tl.exp(d), 0.0)
        s += tl.sum(e, axis=0)
        t += tl.sum(e * d, axis=0)
        # top-2 of {m, second} and {c_max, c_second}
        second = tl.maximum(tl.minimum(m, c_max), tl.maximum(second, c_second))
        return m_new, second, s, t, c_max, c_arg, finite

    @triton.jit
    def _confidence_stats_kernel(
        logits_ptr, stride_row, V, excluded_ptr, temperature, seed_ptr, counter_ptr,
        token_ptr, prob_ptr, margin_prob_ptr, margin_logit_ptr, entropy_ptr,
        BLOCK_V: tl.constexpr, N_EX: tl.constexpr, NOISE: tl.constexpr,
    ):
        """One program per row, one pass over the vocabulary in BLOCK_V chunks.

        Running state: m (max logit = top-1), second (top-2 logit), s = sum exp(x - m),
        t = sum exp(x - m) (x - m); on a new max m' both are rescaled by exp(m - m'), t after
        shifting by (m - m') s. Then log Z = m + log s and H = log s - t / s. The chosen token is
        the first index of the max of x (+ T * Gumbel noise), merged across chunks with a strict
        '>' so earlier chunks win ties; its raw logit is read back once at the end.
        """
        row = tl.program_id(0)
        base = logits_ptr + row.to(tl.int64) * stride_row
        neg_inf = float("-inf")
        lane = tl.arange(0, BLOCK_V)
        if NOISE:
            key = _row_key(seed_ptr, counter_ptr, row)
        m = tl.full([], neg_inf, tl.float32)
        second = tl.full([], neg_inf, tl.float32)
        s = tl.full([], 0.0, tl.float32)
        t = tl.full([], 0.0, tl.float32)
        best_score = tl.full([], neg_inf, tl.float32)
        best_idx = tl.full([], 0, tl.int32)
        for start in range(0, V, BLOCK_V):
            cols = start + lane
            x = _load_chunk(base, cols, V, excluded_ptr, N_EX)
            m, second, s, t, c_max, c_arg, finite = _softmax_chunk(x, lane, m, second, s, t)
            # chosen token
            if NOISE:
                g = -tl.log(-tl.log(_hash_uniform(key, cols)))
                score = tl.where(finite, x + temperature * g, neg_inf)
                k_val, k_arg = tl.max(score, axis=0, return_indices=True, return_indices_tie_break_left=True)
            else:
                k_val = c_max
                k_arg = c_arg
            best_score, best_idx = _merge_best(k_val, k_arg, start, best_score, best_idx)
        x_tok = tl.load(base + best_idx).to(tl.float32)
        tl.store(token_ptr + row, best_idx.to(tl.int64))
        tl.store(prob_ptr + row, tl.exp(x_tok - m) / s)
        tl.store(margin_prob_ptr + row, (1.0 - tl.exp(second - m)) / s)
        tl.store(margin_logit_ptr + row, m - second)
        tl.store(entropy_ptr + row, tl.log(s) - t / s)

else:
    _confidence_stats_kernel = None


def triton_available() -> bool:
    """Whether triton imported (the kernel exists)."""
    return _confidence_stats_kernel is not None


def triton_interpreted() -> bool:
    """Whether the kernel was built for the Triton interpreter (TRITON_INTERPRET=1 at import)."""
    if _confidence_stats_kernel is None:
        return False
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(_confidence_stats_kernel, InterpretedFunction)


def require_kernel(kernel, name: str) -> None:
    """Refuse a launch of ``name``'s Triton kernel where triton did not import (``kernel`` None)."""
    if kernel is None:
        raise RuntimeError(f"{name}_triton needs triton; pip install triton or use DLLM_KERNELS=torch")


def require_launch_device(device: torch.device) -> None:
    """Refuse tensors where no Triton kernel runs: off CUDA without the interpreter."""
    if device.type != "cuda" and not triton_interpreted():
        raise RuntimeError(f"the Triton kernel got a {device.type} tensor: set TRITON_INTERPRET=1 before importing "
                           "dllm to run it on CPU, or use DLLM_KERNELS=torch")


def _default_block_v(V: int, interpreted: bool) -> int:
    """Chunk width: 4096 on GPU (a 16 KiB fp32 tile per iteration, enough loads in flight);
    larger under the interpreter, whose cost is per operation, not per element."""
    return min(16384 if interpreted else 4096, triton.next_power_of_2(V))


def kernel_inputs(name: str, logits: Tensor, excluded_ids: Tensor | None,
                  vocab_start: int = 0) -> tuple[Tensor, Tensor, int, bool]:
    """The launchers' shared checks: (logits with unit column stride, the excluded ids as int32
    columns (id - vocab_start, clamped to [-1, V]: outside the row never matches; a placeholder
    when none), their count, whether interpreted). Raises where the kernel cannot run."""
    require_kernel(_confidence_stats_kernel, name)
    require_launch_device(logits.device)
    interpreted = triton_interpreted()
    V = logits.shape[1]
    if V == 0:
        raise ValueError(f"{name} needs a non-empty vocabulary")
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    n_ex = 0 if excluded_ids is None else excluded_ids.numel()
    if n_ex > MAX_EXCLUDED:
        raise ValueError(f"the kernel takes at most {MAX_EXCLUDED} excluded ids, got {n_ex}")
    if n_ex:
        ex = (excluded_ids.to(logits.device, torch.int64).reshape(-1) - vocab_start).clamp(-1, V).to(torch.int32)
    else:
        ex = torch.zeros(1, dtype=torch.int32, device=logits.device)  # never read (N_EX = 0)
    return logits, ex, n_ex, interpreted


def confidence_stats_triton(logits: Tensor, *, temperature: float = 0.0, seed: int | Tensor | None = None,
                            offset: int = 0, counter: Tensor | None = None,
                            excluded_ids: Tensor | None = None, block_v: int | None = None) -> TokenStats:
    """Launch ``_confidence_stats_kernel``; same contract as ``confidence_stats_torch``.

    logits: (R, V) float32 / bfloat16 / float16 on CUDA (or on CPU under TRITON_INTERPRET=1).
    A row stride is supported; a non-unit column stride is copied to contiguous first.
    excluded_ids: at most MAX_EXCLUDED ids in [0, V) (not range-checked: that would synchronise).
    """
    if logits.dim() != 2:
        raise ValueError(f"confidence_stats expects (rows, vocab) logits, got shape {tuple(logits.shape)}")
    if logits.dtype not in FLOAT_DTYPES:
        raise ValueError(f"confidence_stats expects float32/bfloat16/float16 logits, got {logits.dtype}")
    logits, ex, n_ex, interpreted = kernel_inputs("confidence_stats", logits, excluded_ids)
    R, V = logits.shape
    dev = logits.device
    token = torch.empty(R, dtype=torch.int64, device=dev)
    prob, margin_prob, margin_logit, entropy = (torch.empty(R, dtype=torch.float32, device=dev) for _ in range(4))
    if R == 0:
        return TokenStats(token, prob, margin_prob, margin_logit, entropy)
    block = block_v or _default_block_v(V, interpreted)
    noise = temperature > 0
    if noise:
        seeds, counters = noise_keys(R, dev, seed, temperature, offset, counter)
    else:
        seeds = counters = token  # never read (NOISE = False)
    # enable_fp_fusion=False: x + T * g rounded as torch rounds it (no FMA), so the noised scores,
    # and hence the sampled tokens, match the reference bit for bit up to the log's last ulp.
    _confidence_stats_kernel[(R,)](
        logits, logits.stride(0), V, ex, float(temperature), seeds, counters,
        token, prob, margin_prob, margin_logit, entropy,
        BLOCK_V=block, N_EX=n_ex, NOISE=noise, num_warps=8 if block >= 2048 else 4, enable_fp_fusion=False,
    )
    return TokenStats(token, prob, margin_prob, margin_logit, entropy)
