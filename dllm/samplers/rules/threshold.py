"""Fast-dLLM confidence threshold (Wu et al. 2025, Alg. 1; ``NVlabs/Fast-dLLM: llada/generate.py``).

Commit every eligible position whose probability is at least ``tau`` (0.9 by default), and
always the most confident one, so a step never commits nothing while masks remain. The block
loops until it is full; the step budget is ignored. Theorem 1 of the paper: with n tokens above
1 - eps and (n + 1) eps <= 1, greedy parallel decoding equals greedy sequential decoding.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from dllm.samplers.base import RuleInput, register_rule


def most_confident(scores: Tensor, eligible: Tensor) -> Tensor:
    """(B, W) one-hot of the highest eligible score per row (lowest index on ties); rows with
    nothing eligible get no position. The one-token floor of every adaptive rule."""
    best = scores.masked_fill(~eligible, float("-inf")).argmax(-1, keepdim=True)  # (B, 1)
    return torch.zeros_like(eligible).scatter_(-1, best, True) & eligible


@register_rule("threshold")
@dataclass(kw_only=True, slots=True)
class ConfidenceThreshold:
    tau: float = 0.9

    def __post_init__(self) -> None:
        if not 0 <= self.tau <= 1:
            raise ValueError(f"threshold tau must be a probability in [0, 1], got {self.tau}")

    def __call__(self, inp: RuleInput) -> Tensor:
        prob = inp.stats.prob
        return (inp.eligible & (prob >= self.tau)) | most_confident(prob, inp.eligible)
