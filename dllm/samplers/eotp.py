"""EoTP, end-of-text prediction (Bao et al. 2025): once a position committed at this step, or
the most confident masked prediction, is end-of-text, the row's answer ends there: the masks
after it are filled with end-of-text and its canvas is truncated (keys past the end are
invisible and forwards stop at the furthest live end), so later forwards are shorter and later
blocks cost nothing."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from dllm.kernels import TokenStats
from dllm.samplers.base import register_stopper
from dllm.samplers.threshold import most_confident


@register_stopper("eotp")
@dataclass(kw_only=True, slots=True)
class EndOfTextPrediction:
    def __call__(self, state, stats: TokenStats, commit: Tensor) -> Tensor:
        eligible = state.eligible()
        is_eos = torch.isin(stats.token, state.eos)
        trigger = (commit | most_confident(stats.prob, eligible)) & eligible & is_eos  # (B, W)
        W = trigger.shape[-1]
        first = torch.where(trigger.any(-1), trigger.int().argmax(-1), W)  # (B,)
        ends = torch.arange(W, device=first.device)[None, :] == first[:, None]
        state.truncate_after(first)
        return commit | ends
