"""Statistics of the whole answer span, for stoppers that look past the active window.

The engine's per-step statistics cover the decision window only. SchED and Prophet average the
top-2 logit margin over the answer and then fill every remaining mask with its argmax; EoTP
looks for end-of-text predictions anywhere in the answer. Every forward already produces logits
for more than the window, so ``AnswerView`` folds the latest canvas forward into per-position
buffers (B, G): each answer position holds the statistics of the most recent forward whose
queries covered it and that was charged to its row (so a batch sees what single runs see).

What is fresh at a step depends on the cache mode:
  none    every forward covers the whole answer: all positions are fresh (the papers' setting).
  prefix  the block-start refresh covers everything; later steps cover [block start, end), so
          every remaining mask is fresh and earlier blocks come from the block-start refresh.
  dual    the refresh covers everything; later steps only the window; the rest of the answer
          keeps its block-start statistics (the same staleness the dual cache itself accepts).
  block-causal models never forward past the active block: later positions are not ``seen``.
Inside the window the step's own token and probability win (the sampled token at T > 0).
Cost: one extra ``confidence_stats`` call per step over the forward's answer positions, and the
runner keeps the last forward's logits alive until the stopper has read them. Under tensor
parallelism the logits are the rank's vocabulary shard and the call is the shard statistics'
exchange (``DecodeState.row_statistics``): 32 bytes an answer position a rank, the same numbers.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from dllm.kernels import TokenStats


class AnswerStats(NamedTuple):
    """Per answer position, all (B, G)."""

    token: Tensor  # long: argmax (in the window: the step's chosen token)
    prob: Tensor  # float: probability of ``token``
    margin: Tensor  # float: top-1 minus top-2 logit (SchED / Prophet's signal)
    seen: Tensor  # bool: some forward charged to the row has covered the position


class AnswerView:
    """Latest statistics of every answer position of a batch; owned by the DecodeState."""

    def __init__(self, batch: int, gen_length: int, mask_id: int, device: torch.device) -> None:
        shape = (batch, gen_length)
        self.stats = AnswerStats(
            token=torch.full(shape, mask_id, dtype=torch.long, device=device),
            prob=torch.zeros(shape, device=device), margin=torch.zeros(shape, device=device),
            seen=torch.zeros(shape, dtype=torch.bool, device=device))

    def update(self, state, window: TokenStats) -> AnswerStats:
        """Fold the runner's last canvas forward and this step's window statistics in."""
        P, L = state.canvas.prompt_width, state.canvas.length
        last, state.runner.last = state.runner.last, None
        if last is not None:
            shift = int(state.runner.shift_logits)  # position i reads output i - shift
            B, T, V = last.logits.shape
            lo, hi = max(last.q_start + shift, P), min(last.q_start + T + shift, L)
            if hi > lo:
                first = lo - shift - last.q_start
                raw = last.logits[:, first : first + hi - lo].reshape(-1, V)  # (B * n, V)
                fresh = state.row_statistics(raw).reshape(B, hi - lo)
                self._write(slice(lo - P, hi - P), last.charged, fresh.token, fresh.prob,
                            fresh.margin_logit)
        if window.token.shape[0] == state.canvas.batch_size:  # not a candidate-state batch
            rows = state.eligible().any(-1) & state.runner.active  # rows this step is for
            cols = slice(state.bs - P, state.be - P)
            margin = self.stats.margin[:, cols] if last is not None else window.margin_logit
            self._write(cols, rows, window.token, window.prob, margin)
        return self.stats

    def _write(self, cols: slice, rows: Tensor, token: Tensor, prob: Tensor, margin: Tensor) -> None:
        keep = rows[:, None]  # (B, 1)
        for buf, new in ((self.stats.token, token), (self.stats.prob, prob), (self.stats.margin, margin)):
            buf[:, cols] = torch.where(keep, new.to(buf.dtype), buf[:, cols])
        self.stats.seen[:, cols] |= keep


def answer_region(state) -> Tensor:
    """(B, G) bool: each row's answer positions: before its end (EoTP may have cut the rest) and
    after its lead (a block-causal row's prompt tail at the region's start is prompt: SchED's and
    Prophet's mean margin is the answer's, as in the papers)."""
    G = state.config.gen_length
    idx = torch.arange(G, device=state.end.device)
    region = idx[None, :] < (state.end - state.canvas.prompt_width)[:, None]
    return region if state.lead_mask is None else region & ~state.lead_mask
