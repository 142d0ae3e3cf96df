"""EB-sampler, entropy-bounded unmasking (Ben-Hamu et al. 2025, arXiv 2505.24857).

Sort the eligible positions' entropies ascending, e(1) <= e(2) <= ...; commit the largest k with
sum(e(1..k)) - max(e(1..k)) <= gamma, at least one. The bound is the entropy the k - 1 extra
tokens add over decoding one, so gamma is the single speed / accuracy knob (0.1 in the port
policies.md §1.5 follows).

``bound="sum"`` bounds the whole sum instead: the largest k with sum(e(1..k)) < gamma (strictly),
at least one. That is SDAR's ``entropy_bounded`` remasking (the JetEngine scheduler's rule,
``eb_threshold`` = gamma, 0.35 by default there); it commits one token fewer than the default
bound whenever the next entropy would cross gamma.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import Tensor

from dllm.samplers.base import RuleInput, register_rule, topk_mask

BOUNDS = ("sum_minus_max", "sum")


@register_rule("eb_sampler")
@dataclass(kw_only=True, slots=True)
class EntropyBounded:
    reads_eligible_only = True  # statistics of masked positions only

    gamma: float = 0.1
    bound: Literal["sum_minus_max", "sum"] = "sum_minus_max"

    def __post_init__(self) -> None:
        if self.gamma < 0:
            raise ValueError(f"eb_sampler gamma must be >= 0 nats, got {self.gamma}")
        if self.bound not in BOUNDS:
            raise ValueError(f"eb_sampler bound must be one of {BOUNDS}, got {self.bound!r}")

    def __call__(self, inp: RuleInput) -> Tensor:
        ent = inp.stats.entropy.float().masked_fill(~inp.eligible, float("inf"))
        ranked = ent.sort(dim=-1, stable=True).values  # (B, W) ascending; ineligible last (inf)
        finite = ranked.isfinite()
        ranked = ranked.masked_fill(~finite, 0.0)
        if self.bound == "sum":
            passing = ranked.cumsum(-1) < self.gamma
        else:  # ascending, so the running max is the last term: the bound is the sum of the others
            passing = ranked.cumsum(-1) - ranked.cummax(-1).values <= self.gamma
        k = (passing & finite).sum(-1).clamp_min(1)  # (B,) both bounds are non-decreasing in k
        return topk_mask(-ent, k, inp.eligible)
