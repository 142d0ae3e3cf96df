"""Prophet's stepped early exit (``pixeli99/Prophet: generate_earlyexit.py``), SchED's baseline.

The signal is the mean top-2 logit margin over ``length`` answer tokens starting ``start``
tokens into the answer (the official code: 5 tokens from ``answer_start_pos``, decoded
positions included; ``length=None`` averages the whole answer). It exits when the margin
reaches 7.5 while progress t / T < 0.33, 5.0 while < 0.67, else 2.5 (t = forwards so far, this
one included, as the official ``global_step``), and then fills every remaining mask with its
argmax, in every block.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from dllm.samplers.base import register_stopper
from dllm.samplers.stoppers.sched import MarginExit, progress
from dllm.samplers.stoppers.span import AnswerStats


def prophet_threshold(progress: Tensor | float, thresholds: tuple[float, float, float] = (7.5, 5.0, 2.5)) -> Tensor:
    """The official stair: early / mid / late thresholds at progress < 0.33, < 0.67, else."""
    p = torch.as_tensor(progress, dtype=torch.float32)
    early, mid, late = thresholds
    return torch.where(p < 0.33, early, torch.where(p < 0.67, mid, late))


@register_stopper("prophet")
@dataclass(kw_only=True, slots=True)
class Prophet(MarginExit):
    start: int = 0
    length: int | None = 5
    thresholds: tuple[float, float, float] = (7.5, 5.0, 2.5)

    def __post_init__(self) -> None:
        self.thresholds = tuple(float(t) for t in self.thresholds)
        if len(self.thresholds) != 3:
            raise ValueError(f"prophet thresholds are (early, mid, late), got {self.thresholds}")
        if self.start < 0 or (self.length is not None and self.length <= 0):
            raise ValueError(f"prophet needs start >= 0 and length > 0, got {self.start}, {self.length}")

    def check_config(self, config) -> None:
        if self.start >= config.gen_length:
            raise ValueError(f"prophet start={self.start} is past gen_length={config.gen_length}")

    def region(self, state, view: AnswerStats) -> Tensor:
        """``length`` positions from ``start`` counted from each row's answer start: after a
        block-causal row's lead (its prompt tail), which ``answer_region`` leaves out."""
        idx = torch.arange(view.seen.shape[1], device=view.seen.device)[None, :]
        if state.lead is not None:
            idx = idx - state.lead[:, None]
        stop = view.seen.shape[1] if self.length is None else self.start + self.length
        return ((idx >= self.start) & (idx < stop)).expand_as(view.seen)

    def threshold(self, state) -> Tensor:
        return prophet_threshold(progress(state), self.thresholds)
