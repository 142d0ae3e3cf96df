"""Fast-dLLM confidence threshold (Wu et al. 2025, Alg. 1; ``NVlabs/Fast-dLLM: llada/generate.py``).

Commit every eligible position whose probability is at least ``tau`` (0.9 by default), and
always the most confident one, so a step never commits nothing while masks remain. The block
loops until it is full; the step budget is ignored. Theorem 1 of the paper: with n tokens above
1 - eps and (n + 1) eps <= 1, greedy parallel decoding equals greedy sequential decoding.

``budget_cap=True`` is Dream's official ``alg="confidence_threshold"`` (``_sample`` in Dream's
``generation_utils.py``): a step commits at most its share of the step budget, masks at block
start // steps, plus whatever earlier steps left unused; from the last budgeted step on the cap
is what the budget has left. The most confident position is always taken.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from dllm.samplers.base import RuleInput, register_rule, topk_mask


def most_confident(scores: Tensor, eligible: Tensor) -> Tensor:
    """(B, W) one-hot of the highest eligible score per row (lowest index on ties); rows with
    nothing eligible get no position. The one-token floor of every adaptive rule."""
    best = scores.masked_fill(~eligible, float("-inf")).argmax(-1, keepdim=True)  # (B, 1)
    return torch.zeros_like(eligible).scatter_(-1, best, True) & eligible


@register_rule("threshold")
@dataclass(kw_only=True, slots=True)
class ConfidenceThreshold:
    reads_eligible_only = True  # statistics of masked positions only

    tau: float = 0.9
    budget_cap: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.tau <= 1:
            raise ValueError(f"threshold tau must be a probability in [0, 1], got {self.tau}")

    def __call__(self, inp: RuleInput) -> Tensor:
        prob = inp.stats.prob
        commit = inp.eligible & (prob >= self.tau)
        if self.budget_cap:
            commit &= topk_mask(prob, self.step_cap(inp), inp.eligible)
        return commit | most_confident(prob, inp.eligible)

    def passes(self, inp: RuleInput) -> Tensor:
        """The positions above the threshold alone, no floor (a pipeline's semi-active block)."""
        return inp.eligible & (inp.stats.prob >= self.tau)

    @staticmethod
    def step_cap(inp: RuleInput) -> Tensor:
        """(B,) tokens this step may commit: per-step share times budgeted steps so far, minus
        what the block has already committed (per row, so a batch equals its single runs)."""
        B = inp.eligible.shape[0]
        step = torch.as_tensor(inp.step, device=inp.eligible.device).expand(B)
        per_step = inp.block_masks // inp.num_steps
        committed = inp.block_masks - inp.eligible.sum(-1)
        return per_step * (step.clamp_max(inp.num_steps - 1) + 1) - committed
