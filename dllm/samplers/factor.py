"""Fast-dLLM factor rule: with eligible confidences sorted c1 >= c2 >= ..., commit the largest
prefix whose every n satisfies (n + 1)(1 - c_n) <= f (at least one token)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from dllm.samplers.base import RuleInput, register_rule, topk_mask


@register_rule("factor")
@dataclass(kw_only=True, slots=True)
class ConfidenceFactor:
    factor: float = 1.0

    def __call__(self, inp: RuleInput) -> Tensor:
        prob = inp.stats.prob.masked_fill(~inp.eligible, 0.0)
        ranked = prob.sort(dim=-1, descending=True, stable=True).values  # (B, W)
        n = torch.arange(1, ranked.shape[-1] + 1, device=ranked.device)
        ok = (n + 1) * (1 - ranked) <= self.factor
        ok[:, 0] = True  # the most confident token is always taken
        k = ok.long().cumprod(-1).sum(-1).minimum(inp.eligible.sum(-1))  # (B,)
        return topk_mask(inp.stats.prob, k, inp.eligible)
