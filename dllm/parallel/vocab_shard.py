"""Whole-row operations on vocabulary-sharded logits: top-k / nucleus filtering, log-probabilities.

Under tensor parallelism a rank holds the logits of ids [rank * V_r, (rank + 1) * V_r) of each
row (``TensorShard``; ranks hold increasing ids). These functions give each rank its shard of
what one process computes over the whole row, from exchanges of a few numbers a row, never the
logits (R x V_r floats a rank):

* top-k (``shard_top_k``): the global k-th largest value is among the ranks' own k largest, so
  one all-gather of k values a row finds it exactly; each rank then drops its logits below it
  (ties with the k-th value are kept, as one process's ``logits < kth`` keeps them).
* nucleus (``shard_top_p``): one process keeps, in (value descending, id ascending) order, each
  token whose preceding mass is <= p. That set is every token above a value threshold t*, plus
  the first ties at t*: t* is the smallest value v with mass(x > v) <= p (mass(x > v) is a step
  function of v that only changes at the row's values, so t* is one of them). The ranks find t*
  by a search over the 2^32 ordered float32 bit patterns: each round all-reduces the mass above
  ``PROBES`` thresholds (each rank reads its own from one local sort and suffix sums), and the
  bracket shrinks by a factor PROBES + 1, so ``ROUNDS`` rounds always end with t* exactly. The
  ties at t* need each lower rank's tied mass (one all-gather of a number a row). Why this and
  not gathering candidates until the nucleus is covered: a flat row's nucleus holds most of the
  vocabulary, which would gather most of the logits; the search moves R x PROBES masses a round
  whatever the distribution, in a fixed number of rounds (no host sync decides when to stop).
* log-probabilities (``shard_logprobs``): log Z from the all-reduced max and sum of exp, the
  chosen token's logit from the rank holding it (an all-reduce of it and zeros), and the top-n
  from an all-gather of each rank's n best (value, id), merged by value then lowest id.

Exact up to float rounding of sums: masses and normalisers add the same terms in another order
than one process (ties are broken by the lowest id, as one process's stable sort does).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

PROBES = 255  # thresholds tested per nucleus round (the bracket shrinks by PROBES + 1 a round)
ROUNDS = 4  # enough for any bracket of 2^32 float32 bit patterns: 2^32 -> 2^24 -> 2^16 -> 2^8 -> 1
_INT32_SIGN = 0x80000000


def _order_keys(x: Tensor) -> Tensor:
    """float32 -> int64 keys in the same order (negative floats flipped; -0.0 just below +0.0)."""
    bits = x.contiguous().view(torch.int32).long()
    return torch.where(bits >= 0, bits, -(bits & 0x7FFFFFFF) - 1)


def _key_floats(keys: Tensor) -> Tensor:
    """The float32 values of order keys (the inverse of ``_order_keys``)."""
    bits = torch.where(keys >= 0, keys, (-keys - 1) - _INT32_SIGN)
    return bits.to(torch.int32).view(torch.float32)


def shard_top_k(tp, logits: Tensor, k: int) -> Tensor:
    """(R, V_r) shard logits with everything below the row's global k-th largest value at -inf."""
    vocab = logits.shape[-1] * tp.size
    local = logits.float().topk(min(k, logits.shape[-1]), dim=-1).values  # (R, k')
    every = tp.all_gather(local).permute(1, 0, 2).reshape(logits.shape[0], -1)  # (R, size * k')
    kth = every.topk(min(k, vocab), dim=-1).values[:, -1:]
    return logits.masked_fill(logits.float() < kth, float("-inf"))


def shard_top_p(tp, logits: Tensor, p: float) -> Tensor:
    """(R, V_r) shard logits outside the row's nucleus of mass ``p`` at -inf (see the module)."""
    x = logits.float()
    R = x.shape[0]
    top = tp.all_reduce(x.amax(-1), op=dist.ReduceOp.MAX)  # (R,) the row's max
    e = (x - top[:, None]).double().exp()  # unnormalised probabilities, id order
    bound = p * tp.all_reduce(e.sum(-1))  # (R,) p * Z: the nucleus' mass in e units
    xs, order = x.sort(-1)  # ascending values, for the mass above any threshold
    above = e.gather(1, order).flip(-1).cumsum(-1).flip(-1)  # above[j]: sum of e over xs[j:]
    above = torch.cat([above, above.new_zeros(R, 1)], dim=-1)
    lo = _order_keys(torch.full((R,), float("-inf"), device=x.device)) - 1  # mass above lo: Z > p Z
    hi = _order_keys(top)  # mass above the max: 0 <= p Z
    mass_hi = torch.zeros(R, dtype=torch.float64, device=x.device)
    probe = torch.arange(1, PROBES + 1, device=x.device)
    for _ in range(ROUNDS):  # invariant: mass(x > lo) > p Z >= mass(x > hi)
        keys = lo[:, None] + (hi - lo)[:, None] * probe // (PROBES + 1)
        keys = torch.minimum(torch.maximum(keys, lo[:, None] + 1), hi[:, None])
        at = torch.searchsorted(xs, _key_floats(keys), right=True)  # values <= each threshold
        mass = tp.all_reduce(above.gather(1, at))  # (R, PROBES): the row's mass above each
        inside = mass <= bound[:, None]
        first = torch.where(inside, keys, hi[:, None]).amin(-1)
        pick = torch.where(inside, keys, torch.iinfo(torch.int64).max).argmin(-1, keepdim=True)
        moved = inside.any(-1) & (first < hi)
        mass_hi = torch.where(moved, mass.gather(1, pick)[:, 0], mass_hi)
        hi = torch.where(moved, first, hi)
        lo = torch.maximum(lo, torch.where(inside, lo[:, None], keys).amax(-1))
    threshold = _key_floats(hi)[:, None]  # t*: the row's smallest value with mass(x > t*) <= p
    tied = x == threshold
    tied_e = torch.where(tied, e, 0.0)
    lower = tp.all_gather(tied_e.sum(-1))[: tp.rank].sum(0)  # ties at lower ids, on lower ranks
    before = mass_hi[:, None] + lower[:, None] + tied_e.cumsum(-1) - tied_e
    keep = (x > threshold) | (tied & (before <= bound[:, None]))
    return logits.masked_fill(~keep, float("-inf"))


def filter_shard_logits(tp, logits: Tensor, top_k: int | None, top_p: float | None) -> Tensor:
    """The shard of one process's ``_filter_logits`` (dllm/engine/decoding.py): top-k, then the nucleus."""
    if top_k is not None:
        logits = shard_top_k(tp, logits, top_k)
    if top_p is not None and top_p < 1:
        logits = shard_top_p(tp, logits, top_p)
    return logits


def shard_logprobs(tp, logits: Tensor, token: Tensor, top: int) -> tuple[Tensor, Tensor, Tensor]:
    """(R, V_r) shard logits and (R,) global token ids -> the tokens' log-probabilities (R,) under
    the whole row's softmax, and its ``top`` most likely tokens: logprobs and ids (R, top)."""
    x = logits.float()
    R, V_r = x.shape
    start = tp.rank * V_r
    top_x = tp.all_reduce(x.amax(-1), op=dist.ReduceOp.MAX)  # (R,)
    local = token - start
    held = (local >= 0) & (local < V_r)
    picked = torch.where(held, x.gather(1, local.clamp(0, V_r - 1)[:, None])[:, 0] - top_x, 0.0)
    sums = tp.all_reduce(torch.stack([(x - top_x[:, None]).exp().sum(-1), picked], dim=-1))  # (R, 2)
    log_z = sums[:, 0].log()
    chosen = sums[:, 1] - log_z
    if not top:
        return chosen, x.new_zeros(R, 0), token.new_zeros(R, 0)
    values, ids = x.topk(min(top, V_r), dim=-1)
    pairs = tp.all_gather(torch.stack([values.double(), (ids + start).double()], dim=-1))  # (size, R, n, 2)
    pairs = pairs.permute(1, 0, 2, 3).reshape(R, -1, 2)
    by_id = pairs[..., 1].argsort(-1)  # lowest id first among equal values, then by value
    pairs = pairs.gather(1, by_id[..., None].expand_as(pairs))
    best = pairs[..., 0].argsort(dim=-1, descending=True, stable=True)[:, :top]
    values = pairs[..., 0].gather(1, best).float() - top_x[:, None] - log_z[:, None]
    return chosen, values, pairs[..., 1].gather(1, best).long()


__all__ = ["PROBES", "ROUNDS", "filter_shard_logits", "shard_logprobs", "shard_top_k", "shard_top_p"]
