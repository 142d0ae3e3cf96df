"""Entropy-based adaptive rules.

``eb_sampler`` (Ben-Hamu et al. 2025): sort eligible entropies ascending and commit the
largest k with sum(e_1..e_k) - max(e_1..e_k) <= gamma (at least one).
``entropy_threshold`` (dParallel's inference rule): commit eligible positions with entropy <=
tau nats, and always the lowest-entropy one.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from dllm.samplers.base import RuleInput, register_rule, topk_mask
from dllm.samplers.threshold import most_confident


@register_rule("eb_sampler")
@dataclass(kw_only=True, slots=True)
class EntropyBounded:
    gamma: float = 0.1

    def __call__(self, inp: RuleInput) -> Tensor:
        ent = inp.stats.entropy.masked_fill(~inp.eligible, float("inf"))
        ranked = ent.sort(dim=-1, stable=True).values  # ascending; ineligible last (inf)
        finite = ranked.isfinite()
        ranked = ranked.masked_fill(~finite, 0.0)
        bound = ranked.cumsum(-1) - ranked.cummax(-1).values  # sorted: cummax is the last term
        k = ((bound <= self.gamma) & finite).sum(-1).clamp_min(1)
        return topk_mask(-inp.stats.entropy, k, inp.eligible)


@register_rule("entropy_threshold")
@dataclass(kw_only=True, slots=True)
class EntropyThreshold:
    tau: float = 0.5

    def __call__(self, inp: RuleInput) -> Tensor:
        ent = inp.stats.entropy
        return (inp.eligible & (ent <= self.tau)) | most_confident(-ent, inp.eligible)
