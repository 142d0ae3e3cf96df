"""SchED, progress-aware confidence schedules for early exit (Mohamed et al. 2025,
arXiv 2512.02892; definitions per policies.md §2, no public code).

At each forward t of a row (t = its NFE so far, 1 for the first), the signal is the mean top-2
LOGIT margin over the answer span A (the whole generated span, decoded positions included, as
in the paper; ``span="masked"`` averages over the still-masked positions only). When it reaches
tau(t / T), T = the configured step budget ``config.steps``, every remaining mask of the answer
takes its argmax ("all-in", as Prophet) and the row stops. Schedules are non-increasing from
tau_high to tau_low:
  linear       tau_high - (tau_high - tau_low) p
  cosine       tau_low + (tau_high - tau_low) (1 + cos(pi p)) / 2
  exp          tau_low + (tau_high - tau_low) exp(-k p)
Defaults follow the paper's best reported setting (exp, k = 16, tau 7.5 -> 2.5). With adaptive
rules T is the budget, not the steps taken: p is clamped to 1 past it.

Margins of positions outside the window come from the latest forward that covered them (see
dllm/samplers/stoppers/span.py for what each cache mode keeps fresh). A row that exits with positions no
forward has covered yet (block-causal models) commits each later window on its first forward.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor

from dllm.kernels import TokenStats
from dllm.samplers.base import register_stopper
from dllm.samplers.stoppers.span import AnswerStats, answer_region

SCHEDULES = ("linear", "cosine", "exp")
SPANS = ("answer", "masked")


def sched_threshold(progress: Tensor | float, schedule: str, tau_high: float, tau_low: float,
                    k: float) -> Tensor:
    """tau(p) for progress p (clamped to [0, 1]), elementwise."""
    p = torch.as_tensor(progress, dtype=torch.float32).clamp(0.0, 1.0)
    if schedule == "linear":
        return tau_high - (tau_high - tau_low) * p
    if schedule == "cosine":
        return tau_low + (tau_high - tau_low) * 0.5 * (1 + torch.cos(math.pi * p))
    if schedule == "exp":
        return tau_low + (tau_high - tau_low) * torch.exp(-k * p)
    raise ValueError(f"unknown SchED schedule {schedule!r}; known: {SCHEDULES}")


def progress(state) -> Tensor:
    """(B,) t / T: each row's forwards so far (this one included) over the step budget."""
    return state.runner.nfe.float() / state.config.steps


@dataclass(kw_only=True, slots=True)
class MarginExit:
    """Shared all-in exit: when a row's mean logit margin over ``region`` reaches ``tau``,
    commit every remaining answer mask with its argmax. Subclasses choose region and tau."""

    needs_answer_stats: ClassVar[bool] = True
    exited: Tensor | None = field(default=None, init=False, repr=False)  # (B,) per decode

    def region(self, state, view: AnswerStats) -> Tensor:
        raise NotImplementedError

    def threshold(self, state) -> Tensor:
        raise NotImplementedError

    def __call__(self, state, stats: TokenStats, commit: Tensor) -> Tensor:
        view = state.answer_statistics(stats)
        eligible = state.eligible()  # (B, W)
        live = eligible.any(-1) & state.runner.active  # rows this forward was for
        region = self.region(state, view) & view.seen & answer_region(state)  # (B, G)
        count = region.sum(-1)
        gap = (view.margin * region).sum(-1) / count.clamp_min(1)  # (B,)
        if self.exited is None:
            self.exited = torch.zeros_like(live)
        self.exited |= live & (count > 0) & (gap >= self.threshold(state).to(gap.device))
        fill = self.exited[:, None] & state.answer_masks() & view.seen
        P = state.canvas.prompt_width
        fill[:, state.bs - P : state.be - P] = False  # the window goes through ``commit``
        state.commit_answer(fill, view.token, scores=view.prob)  # a constrained row: what keeps it completable
        return commit | (eligible & self.exited[:, None])


@register_stopper("sched")
@dataclass(kw_only=True, slots=True)
class SchED(MarginExit):
    schedule: str = "exp"
    tau_high: float = 7.5
    tau_low: float = 2.5
    k: float = 16.0
    span: str = "answer"

    def __post_init__(self) -> None:
        sched_threshold(0.0, self.schedule, self.tau_high, self.tau_low, self.k)  # validates the name
        if self.tau_low > self.tau_high:
            raise ValueError(f"SchED needs tau_low <= tau_high, got {self.tau_low} > {self.tau_high}")
        if self.span not in SPANS:
            raise ValueError(f"unknown SchED span {self.span!r}; known: {SPANS}")

    def region(self, state, view: AnswerStats) -> Tensor:
        if self.span == "masked":
            return state.answer_masks()
        return torch.ones_like(view.seen)

    def threshold(self, state) -> Tensor:
        return sched_threshold(progress(state), self.schedule, self.tau_high, self.tau_low, self.k)
