"""Each row's constraint applied to a decode: candidates masked before the statistics, commits
kept only while the canvas stays completable.

``DecodeState`` holds one ``CanvasConstraints`` when some row is constrained and calls it at two
points of the step: ``mask_logits`` (each eligible window position of a constrained row keeps
the tokens, and end-of-text, through which some completion of the canvas is a word) and
``filter_commit`` (the rule's commits taken together must keep the canvas completable; if they do
not, they are taken one by one, most probable first, each kept only if it does: the first always
is, so a step that commits commits something). Unconstrained rows pass through untouched.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from dllm.samplers.constraints.canvas import allowed_classes, canvas_sets, position_kinds
from dllm.samplers.constraints.token_dfa import TokenDFA


@dataclass(frozen=True, slots=True)
class RowConstraint:
    """A row's language: ``dfa`` from state ``start`` (default its initial state), the word
    ending within ``limit`` answer positions (max_tokens; None: the canvas)."""

    dfa: TokenDFA
    start: int | None = None
    limit: int | None = None

    @property
    def state(self) -> int:
        return self.dfa.start if self.start is None else self.start

    def after(self, tokens: list[int]) -> "RowConstraint":
        """The same constraint for a row resumed after answer ``tokens`` (no end-of-text)."""
        limit = None if self.limit is None else self.limit - len(tokens)
        return dataclasses.replace(self, start=self.dfa.run(self.state, tokens), limit=limit)


class CanvasConstraints:
    """The constrained rows of one decode (None: a free row)."""

    def __init__(self, rows: list[RowConstraint | None], mask_id: int, eos_ids: list[int]) -> None:
        self.rows, self.mask_id = rows, mask_id
        self.eos_ids = np.asarray(eos_ids, dtype=np.int64)
        self.scores: Tensor | None = None  # (B, W) the last statistics' probabilities: commit order

    def _regions(self, state) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """The canvas on the host and each row's answer span [start, end) in canvas positions."""
        tokens = state.tokens.cpu().numpy()
        P = state.canvas.prompt_width
        lead = [0] * len(self.rows) if state.lead is None else state.lead.tolist()
        ends = state.end.tolist()
        return tokens, [(P + lead[r], ends[r]) for r in range(len(self.rows))]

    def _sets(self, row: int, region: np.ndarray):
        constraint = self.rows[row]
        kinds = position_kinds(constraint.dfa, region, self.mask_id, self.eos_ids, constraint.limit)
        return canvas_sets(constraint.dfa, kinds, constraint.state, constraint.limit)

    def check_start(self, state) -> None:
        """Refuse, before any forward, a row whose canvas holds no word of its language."""
        tokens, spans = self._regions(state)
        for row, constraint in enumerate(self.rows):
            if constraint is None:
                continue
            lo, hi = spans[row]
            if not self._sets(row, tokens[row, lo:hi]).completable(constraint.state):
                room = hi - lo if constraint.limit is None else min(hi - lo, constraint.limit)
                raise ValueError(f"row {row}: no word of the constraint {constraint.dfa.regex[:120]!r} fits in "
                                 f"{room} answer tokens; raise max_tokens (or gen_length), or loosen the constraint")

    def mask_logits(self, state, logits: Tensor) -> Tensor:
        """(B, W, V) logits with -inf at every token (and end-of-text) that would leave an eligible
        window position of a constrained row without a completion in the language."""
        eligible = (state.eligible() & state.runner.active[:, None]).cpu().numpy()
        tokens, spans = self._regions(state)
        keep = None  # (B, W, V) bool, built on the host and applied in one masked_fill
        for row, constraint in enumerate(self.rows):
            cols = np.flatnonzero(eligible[row])
            if constraint is None or len(cols) == 0:
                continue
            lo, hi = spans[row]
            sets = self._sets(row, tokens[row, lo:hi])
            classes, eos = allowed_classes(constraint.dfa, sets, cols + state.bs - lo)
            if keep is None:
                keep = np.ones(logits.shape, dtype=bool)
            V = min(len(constraint.dfa.token_class), logits.shape[-1])
            allowed = classes[:, constraint.dfa.token_class[:V]]  # (K, V)
            allowed[:, self.eos_ids] = eos[:, None]
            keep[row, cols, :V] = allowed
            keep[row, cols, V:] = False  # ids past the tokenizer: never allowed
        if keep is None:
            return logits
        return logits.masked_fill(~torch.from_numpy(keep).to(logits.device), float("-inf"))

    def filter_commit(self, state, mask: Tensor, token: Tensor) -> Tensor:
        """``mask`` (B, W) without the commits that would make a constrained row's canvas
        uncompletable (see the module's docstring for the order)."""
        host_mask = mask.cpu().numpy().copy()
        host_token = token.cpu().numpy()
        tokens, spans = self._regions(state)
        scores = None if self.scores is None else self.scores.float().cpu().numpy()
        changed = False
        for row, constraint in enumerate(self.rows):
            cols = np.flatnonzero(host_mask[row])
            if constraint is None or len(cols) == 0:
                continue
            lo, hi = spans[row]
            region = tokens[row, lo:hi].copy()
            at = cols + state.bs - lo
            region[at] = host_token[row, cols]
            if self._sets(row, region).completable(constraint.state):
                continue
            region[at] = self.mask_id
            order = cols if scores is None else cols[np.argsort(-scores[row, cols], kind="stable")]
            for col in order:
                region[col + state.bs - lo] = host_token[row, col]
                if not self._sets(row, region).completable(constraint.state):
                    region[col + state.bs - lo] = self.mask_id
                    host_mask[row, col] = False
                    changed = True
        return torch.from_numpy(host_mask).to(mask.device) if changed else mask
