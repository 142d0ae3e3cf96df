"""Fast-dLLM factor rule (``get_transfer_index_dynamic(..., factor=f)`` in later Fast-dLLM copies).

Sort the eligible confidences descending, c(1) >= c(2) >= ...; commit the largest prefix of n
tokens whose every member satisfies (n + 1)(1 - c(n)) <= f, at least one. This is Theorem 1's
condition (n + 1) eps <= 1 scaled by f (default 1): the more confident the top tokens, the more
are committed together. A prefix that reaches the last eligible token commits them all.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from dllm.samplers.base import RuleInput, register_rule, topk_mask


@register_rule("factor")
@dataclass(kw_only=True, slots=True)
class ConfidenceFactor:
    reads_eligible_only = True  # statistics of masked positions only

    factor: float = 1.0

    def __post_init__(self) -> None:
        if self.factor <= 0:
            raise ValueError(f"factor must be positive, got {self.factor}")

    def __call__(self, inp: RuleInput) -> Tensor:
        prob = inp.stats.prob.float().masked_fill(~inp.eligible, float("-inf"))
        ranked = prob.sort(dim=-1, descending=True, stable=True).values  # (B, W); ineligible last
        n = torch.arange(1, ranked.shape[-1] + 1, device=ranked.device)
        ok = (n + 1) * (1 - ranked) <= self.factor  # -inf (ineligible) never passes
        ok[:, 0] = True  # the most confident token is always taken
        k = ok.long().cumprod(-1).sum(-1)  # (B,) length of the passing prefix
        return topk_mask(prob, k, inp.eligible)
