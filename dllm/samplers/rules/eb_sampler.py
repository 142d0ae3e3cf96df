"""EB-sampler, entropy-bounded unmasking (Ben-Hamu et al. 2025, arXiv 2505.24857).

Sort the eligible positions' entropies ascending, e(1) <= e(2) <= ...; commit the largest k with
sum(e(1..k)) - max(e(1..k)) <= gamma, at least one. The bound is the entropy the k - 1 extra
tokens add over decoding one, so gamma is the single speed / accuracy knob (0.1 in the port
policies.md §1.5 follows).
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from dllm.samplers.base import RuleInput, register_rule, topk_mask


@register_rule("eb_sampler")
@dataclass(kw_only=True, slots=True)
class EntropyBounded:
    reads_eligible_only = True  # statistics of masked positions only

    gamma: float = 0.1

    def __post_init__(self) -> None:
        if self.gamma < 0:
            raise ValueError(f"eb_sampler gamma must be >= 0 nats, got {self.gamma}")

    def __call__(self, inp: RuleInput) -> Tensor:
        ent = inp.stats.entropy.float().masked_fill(~inp.eligible, float("inf"))
        ranked = ent.sort(dim=-1, stable=True).values  # (B, W) ascending; ineligible last (inf)
        finite = ranked.isfinite()
        ranked = ranked.masked_fill(~finite, 0.0)
        # ascending, so the running max is the last term: the bound is the sum of the others
        bound = ranked.cumsum(-1) - ranked.cummax(-1).values
        k = ((bound <= self.gamma) & finite).sum(-1).clamp_min(1)  # (B,) bound is non-decreasing
        return topk_mask(-ent, k, inp.eligible)
