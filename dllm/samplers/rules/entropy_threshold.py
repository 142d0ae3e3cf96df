"""dParallel's inference rule (Chen et al. 2025, ``czg1225/dParallel: LLaDA/generate.py``):
commit every eligible position whose predictive entropy is at most ``tau`` nats, and always the
lowest-entropy one, so no step is empty. The distilled dParallel models are trained to make
this bound bite early; the rule itself runs on any model.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from dllm.samplers.base import RuleInput, register_rule
from dllm.samplers.rules.threshold import most_confident


@register_rule("entropy_threshold")
@dataclass(kw_only=True, slots=True)
class EntropyThreshold:
    reads_eligible_only = True  # statistics of masked positions only

    tau: float = 0.5

    def __post_init__(self) -> None:
        if self.tau < 0:
            raise ValueError(f"entropy_threshold tau must be >= 0 nats, got {self.tau}")

    def __call__(self, inp: RuleInput) -> Tensor:
        ent = inp.stats.entropy
        return (inp.eligible & (ent <= self.tau)) | most_confident(-ent, inp.eligible)

    def passes(self, inp: RuleInput) -> Tensor:
        """The positions within the entropy bound alone, no floor (a pipeline's semi-active block)."""
        return inp.eligible & (inp.stats.entropy <= self.tau)
