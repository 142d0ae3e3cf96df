"""Fused per-row confidence statistics: the one pass every unmasking rule reads.

Per row of logits (R, V): the chosen token (argmax, or a Gumbel-max sample at temperature T),
its probability under the un-tempered softmax, the top-2 margin in probability and in logit,
and the entropy. ``excluded_ids`` (e.g. the mask token) count as -inf everywhere.

Noise is counter-based: u = hash(seed, offset + row, col), the same integer hash in torch and in
Triton, so the kernel and its reference choose the same tokens at T > 0 too.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

_MASK32 = 0xFFFFFFFF


class TokenStats(NamedTuple):
    token: Tensor  # int64 (...,)
    prob: Tensor  # float32: softmax probability of ``token``
    margin_prob: Tensor  # float32: top-1 minus top-2 probability
    margin_logit: Tensor  # float32: top-1 minus top-2 logit
    entropy: Tensor  # float32: -sum p log p (nats)

    def reshape(self, *shape: int) -> "TokenStats":
        return TokenStats(*(f.reshape(*shape) for f in self))

    def index(self, idx) -> "TokenStats":
        return TokenStats(*(f[idx] for f in self))


def hash_uniform_torch(seed: int, rows: Tensor, cols: Tensor) -> Tensor:
    """Uniform in (0, 1) from a 32-bit integer hash (lowbias32) of (seed, row, col).

    rows (R, 1), cols (1, V) int64 -> (R, V) float32. Arithmetic is done in int64 and masked to
    32 bits, matching the kernel's uint32 wrap-around exactly.
    """
    x = (rows * 0x9E3779B1 + cols * 0x85EBCA77 + seed * 0xC2B2AE3D) & _MASK32
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _MASK32
    x = x ^ (x >> 16)
    return ((x >> 8).float() + 0.5) * (1.0 / 16777216.0)  # 24 bits -> (0, 1)


def confidence_stats_torch(logits: Tensor, *, temperature: float = 0.0, seed: int | None = None,
                           offset: int = 0, excluded_ids: Tensor | None = None) -> TokenStats:
    """Reference implementation (and the CPU path). logits: (R, V), any float dtype."""
    if logits.dim() != 2:
        raise ValueError(f"confidence_stats expects (rows, vocab) logits, got shape {tuple(logits.shape)}")
    x = logits.float()
    if excluded_ids is not None and excluded_ids.numel():
        x = x.index_fill(1, excluded_ids.to(x.device), float("-inf"))
    logp = x.log_softmax(-1)  # (R, V)
    p = logp.exp()
    top2 = x.topk(2, dim=-1).values  # (R, 2)
    m = top2[:, :1]
    z = (x - m).exp().sum(-1)  # (R,)
    p1, p2 = 1.0 / z, (top2[:, 1] - m[:, 0]).exp() / z
    entropy = -(p * logp.masked_fill(p == 0, 0.0)).sum(-1)
    if temperature > 0:
        R, V = x.shape
        rows = torch.arange(offset, offset + R, device=x.device)[:, None]
        cols = torch.arange(V, device=x.device)[None, :]
        u = hash_uniform_torch(seed or 0, rows, cols)
        gumbel = -torch.log(-torch.log(u))
        token = (x + temperature * gumbel).argmax(-1)
    else:
        token = x.argmax(-1)
    prob = p.gather(-1, token[:, None])[:, 0]
    return TokenStats(token, prob, p1 - p2, top2[:, 0] - top2[:, 1], entropy)
