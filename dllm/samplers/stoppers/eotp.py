"""EoTP, end-of-text prediction (Bao et al. 2025, arXiv 2509.25188, ``generate_l2p_eot``).

Per step, per row: if a position committed at this step is end-of-text, the answer ends right
after the first such position; otherwise, if some still-masked answer position predicts
end-of-text, it ends right after the one predicting it most confidently (that position stays
masked and is decoded later). The engine then truncates the row (``DecodeState.truncate``):
positions past the end become end-of-text and invisible keys, so the row decodes as if its
canvas were shorter, and later forwards stop at the furthest end over active rows; blocks past
every row's end cost nothing. In a batch, rows truncate independently and give the tokens they
give alone. Predictions outside the window come from the latest forward that covered them (see
dllm/samplers/stoppers/span.py); with a cache, the cached K/V past the end is simply never attended.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dllm.kernels import TokenStats
from dllm.samplers.base import register_stopper
from dllm.samplers.stoppers.span import answer_region


def first_true(mask: Tensor) -> Tensor:
    """(B,) index of the first True per row of (B, N); N where there is none."""
    N = mask.shape[-1]
    return torch.where(mask.any(-1), mask.int().argmax(-1), N)


@register_stopper("eotp")
@dataclass(kw_only=True, slots=True)
class EndOfTextPrediction:
    needs_answer_stats: ClassVar[bool] = True

    def __call__(self, state, stats: TokenStats, commit: Tensor) -> Tensor:
        view = state.answer_statistics(stats)
        P, L = state.canvas.prompt_width, state.canvas.length
        eligible = state.eligible()  # (B, W)
        live = eligible.any(-1) & state.runner.active  # (B,) rows this step is for
        committed = commit & eligible & torch.isin(stats.token, state.eos)  # (B, W)
        end_committed = state.bs + first_true(committed) + 1  # canvas position, past the window if none
        masked = state.answer_masks()  # (B, G); a prompt tail is no mask, never cut
        masked[:, state.bs - P : state.be - P] &= ~commit  # committed now: not a prediction
        predicted = masked & view.seen & answer_region(state) & torch.isin(view.token, state.eos)
        best = view.prob.masked_fill(~predicted, -1.0).argmax(-1)  # (B,)
        end_predicted = torch.where(predicted.any(-1), P + best + 1, L)
        end = torch.where(committed.any(-1), end_committed, end_predicted)
        state.truncate(torch.where(live, end, L))
        return commit
