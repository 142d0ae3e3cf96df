"""Progress-aware early exit: SchED (Mohamed et al. 2025) and Prophet's stepped baseline.

At each forward, g = mean top-2 LOGIT margin over the row's masked positions of the decision
window; when g >= tau(t / T) (t = forwards so far, T = the configured step budget), every
remaining mask of the window takes its argmax, and the row stays in "all-in" mode, so each
later block is committed by its first forward. With one block (block_length = gen_length,
the setting of the paper) the window is the whole answer span. The paper averages over the
whole span; here decoded positions are left out because this runtime's models are not trained
to predict unmasked positions (documented deviation).

Schedules (non-increasing from tau_high to tau_low): linear, cosine, exp (rate k);
``prophet``: 7.5 / 5.0 / 2.5 for progress < 1/3, < 2/3, else.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from dllm.kernels import TokenStats
from dllm.samplers.base import register_stopper

SCHEDULES = ("linear", "cosine", "exp")


def sched_threshold(progress: float, schedule: str, tau_high: float, tau_low: float, k: float) -> float:
    p = min(max(progress, 0.0), 1.0)
    if schedule == "linear":
        return tau_high - (tau_high - tau_low) * p
    if schedule == "cosine":
        return tau_low + (tau_high - tau_low) * 0.5 * (1 + math.cos(math.pi * p))
    if schedule == "exp":
        return tau_low + (tau_high - tau_low) * math.exp(-k * p)
    raise ValueError(f"unknown SchED schedule {schedule!r}; known: {SCHEDULES}")


def prophet_threshold(progress: float) -> float:
    return 7.5 if progress < 1 / 3 else 5.0 if progress < 2 / 3 else 2.5


@dataclass(kw_only=True, slots=True)
class _MarginExit:
    exited: Tensor | None = field(default=None, repr=False)

    def threshold(self, progress: float) -> float:
        raise NotImplementedError

    def __call__(self, state, stats: TokenStats, commit: Tensor) -> Tensor:
        eligible = state.eligible()
        if self.exited is None:
            self.exited = torch.zeros(eligible.shape[0], dtype=torch.bool, device=eligible.device)
        count = eligible.sum(-1)
        margin = (stats.margin_logit.float() * eligible).sum(-1) / count.clamp_min(1)  # (B,)
        tau = self.threshold(state.forwards / state.config.steps)
        self.exited |= (count > 0) & (margin >= tau)
        return commit | (eligible & self.exited[:, None])


@register_stopper("sched")
@dataclass(kw_only=True, slots=True)
class SchED(_MarginExit):
    schedule: str = "exp"
    tau_high: float = 7.5
    tau_low: float = 2.5
    k: float = 16.0

    def __post_init__(self) -> None:
        sched_threshold(0.0, self.schedule, self.tau_high, self.tau_low, self.k)  # validates the name
        if self.tau_low > self.tau_high:
            raise ValueError(f"SchED needs tau_low <= tau_high, got {self.tau_low} > {self.tau_high}")

    def threshold(self, progress: float) -> float:
        return sched_threshold(progress, self.schedule, self.tau_high, self.tau_low, self.k)


@register_stopper("prophet")
@dataclass(kw_only=True, slots=True)
class Prophet(_MarginExit):
    def threshold(self, progress: float) -> float:
        return prophet_threshold(progress)
