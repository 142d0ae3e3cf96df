"""Dream's reference rules on the ``linspace(1, eps, steps + 1)`` schedule.

``origin``: each masked position is revealed independently with probability 1 - s/t.
``maskgit_plus`` / ``topk_margin`` / ``entropy``: reveal k = floor(n (1 - s/t)) positions (all at
the last step), ranked by probability, top-2 probability margin or negative entropy; with
``alg_temp`` > 0 they are drawn without replacement from softmax(score / alg_temp) (Gumbel top-k).
The official loop averages n over the batch (a bug); here n is each row's own mask count, and
random draws come from each row's own stream (``RuleInput.uniform``), not a shared generator.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from dllm.samplers.base import RuleInput, register_rule, topk_mask


def _reveal_ratio(inp: RuleInput, eps: float) -> tuple[Tensor, Tensor]:
    """Per row: 1 - s/t at this step (float32, as the official schedule) and "last step"."""
    B = inp.eligible.shape[0]
    step = torch.as_tensor(inp.step, device=inp.eligible.device).expand(B).clamp_max(inp.num_steps - 1)
    ts = torch.linspace(1, eps, inp.num_steps + 1, device=step.device)
    return 1 - ts[step + 1] / ts[step], step >= inp.num_steps - 1


@register_rule("origin")
@dataclass(kw_only=True, slots=True)
class DreamOrigin:
    reads_eligible_only = True  # statistics of masked positions only

    eps: float = 1e-3

    def __call__(self, inp: RuleInput) -> Tensor:
        ratio, last = _reveal_ratio(inp, self.eps)
        return ((inp.uniform() < ratio[:, None]) | last[:, None]) & inp.eligible


@dataclass(kw_only=True, slots=True)
class _DreamScored:
    reads_eligible_only = True  # statistics of masked positions only

    eps: float = 1e-3
    alg_temp: float = 0.0

    def score(self, inp: RuleInput) -> Tensor:
        raise NotImplementedError

    def __call__(self, inp: RuleInput) -> Tensor:
        n = inp.eligible.sum(-1)  # (B,) per-row, not the batch average
        ratio, last = _reveal_ratio(inp, self.eps)
        k = torch.where(last, n, (n * ratio).long())  # int() truncation, as the official loop
        scores = self.score(inp).float()
        if self.alg_temp > 0:
            gumbel = -torch.log(-torch.log(inp.uniform()))  # u in (0, 1): finite
            scores = scores / self.alg_temp + gumbel
        return topk_mask(scores, k, inp.eligible)


@register_rule("maskgit_plus")
@dataclass(kw_only=True, slots=True)
class DreamMaskgitPlus(_DreamScored):
    def score(self, inp: RuleInput) -> Tensor:
        return inp.stats.prob


@register_rule("topk_margin")
@dataclass(kw_only=True, slots=True)
class DreamTopkMargin(_DreamScored):
    def score(self, inp: RuleInput) -> Tensor:
        return inp.stats.margin_prob


@register_rule("entropy")
@dataclass(kw_only=True, slots=True)
class DreamEntropy(_DreamScored):
    def score(self, inp: RuleInput) -> Tensor:
        return -inp.stats.entropy
