"""Each row's constraint applied to a decode: candidates masked before the statistics, commits
kept only while the canvas stays completable.

``DecodeState`` holds one ``CanvasConstraints`` when some row is constrained and calls it at two
points of the step: ``mask_logits`` (each eligible window position of a constrained row keeps
the tokens, and end-of-text, through which some completion of the canvas is a word) and
``filter_commit`` (the rule's commits taken together must keep the canvas completable; if they do
not, they are taken one by one, most probable first, each kept only if it does: the first always
is, so a step that commits commits something). Unconstrained rows pass through untouched.

Both also run on candidate states (FreeDave's drafts, SSD's tree nodes, LoPA's branches): a
candidate's statistics are masked for its own canvas and its base-rule step is filtered on it,
so the step verified from a candidate is the constrained decode's step from that state.
Stoppers go through the same filter (SchED / Prophet's all-in fill, ``offset``) or ask
``completable_ends`` (EoTP's cut).
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

    dfa: TokenDFA  # or a TokenGrammar, whose state is the answer prefix read so far (a tuple)
    start: int | tuple[int, ...] | None = None
    limit: int | None = None

    @property
    def state(self) -> int | tuple[int, ...]:
        return self.dfa.start if self.start is None else self.start

    def after(self, tokens: list[int]) -> "RowConstraint":
        """The same constraint for a row resumed after answer ``tokens`` (no end-of-text)."""
        limit = None if self.limit is None else self.limit - len(tokens)
        return dataclasses.replace(self, start=self.dfa.run(self.state, tokens), limit=limit)


class CanvasConstraints:
    """The constrained rows of one decode (None: a free row). Every method takes the states it
    works on: the canvas (``tokens=None``), or candidate canvases (N, L) of canvas ``rows`` (N,)
    (FreeDave's drafts, SSD's tree nodes, LoPA's branches), each checked as its own canvas."""

    def __init__(self, rows: list[RowConstraint | None], mask_id: int, eos_ids: list[int]) -> None:
        self.rows, self.mask_id = rows, mask_id
        self.eos_ids = np.asarray(eos_ids, dtype=np.int64)
        self.scores: Tensor | None = None  # (B, W) the last canvas statistics' probabilities: the commit order

    def _regions(self, state, tokens: Tensor | None = None,
                 rows: Tensor | None = None) -> tuple[np.ndarray, list[int], list[tuple[int, int]]]:
        """The states on the host, the canvas row of each and its answer span [start, end) in
        canvas positions (after the row's prompt tail, before its end)."""
        host = (state.tokens if tokens is None else tokens).cpu().numpy()
        row_of = list(range(len(self.rows))) if rows is None else rows.tolist()
        P = state.canvas.prompt_width
        lead = [0] * len(self.rows) if state.lead is None else state.lead.tolist()
        ends = state.end.tolist()
        return host, row_of, [(P + lead[r], ends[r]) for r in row_of]

    def _sets(self, row: int, region: np.ndarray):
        constraint = self.rows[row]
        kinds = position_kinds(constraint.dfa, region, self.mask_id, self.eos_ids, constraint.limit)
        return canvas_sets(constraint.dfa, kinds, constraint.state, constraint.limit)

    def _completable(self, row: int, region: np.ndarray) -> bool:
        return self._sets(row, region).completable(self.rows[row].state)

    def check_start(self, state) -> None:
        """Refuse, before any forward, a row whose canvas holds no word of its language."""
        tokens, _, spans = self._regions(state)
        for row, constraint in enumerate(self.rows):
            if constraint is None:
                continue
            lo, hi = spans[row]
            if not self._completable(row, tokens[row, lo:hi]):
                room = hi - lo if constraint.limit is None else min(hi - lo, constraint.limit)
                raise ValueError(f"row {row}: no word of the constraint {constraint.dfa.regex[:120]!r} fits in "
                                 f"{room} answer tokens; raise max_tokens (or gen_length), or loosen the constraint")

    def mask_logits(self, state, logits: Tensor, tokens: Tensor | None = None, rows: Tensor | None = None,
                    vocab_start: int = 0) -> Tensor:
        """(N, W, V) logits with -inf at every token (and end-of-text) that would leave an eligible
        window position of a constrained state without a completion in the language. A candidate
        state that is not completable itself (an SSD swap node) is left unmasked: no verified step
        starts from it, so its statistics decide nothing; the canvas always is. ``vocab_start``:
        the logits hold ids [vocab_start, vocab_start + V) (a tensor-parallel rank's shard): every
        rank decides the same canvas question and masks its own columns of the answer."""
        active = state.runner.active if rows is None else state.runner.active[rows]
        eligible = (state.eligible(tokens) & active[:, None]).cpu().numpy()
        host, row_of, spans = self._regions(state, tokens, rows)
        keep = None  # (N, W, V) bool, built on the host and applied in one masked_fill
        for n, row in enumerate(row_of):
            constraint = self.rows[row]
            cols = np.flatnonzero(eligible[n])
            if constraint is None or len(cols) == 0:
                continue
            lo, hi = spans[n]
            sets = self._sets(row, host[n, lo:hi])
            if not sets.completable(constraint.state):
                if rows is None:  # every commit and cut keeps the canvas completable: a bug if not
                    raise RuntimeError(f"row {row}'s canvas no longer holds a word of its constraint")
                continue
            if keep is None:
                keep = np.ones(logits.shape, dtype=bool)
            keep[n, cols] = self._allowed(row, sets, cols + state.bs - lo, vocab_start, logits.shape[-1])
        if keep is None:
            return logits
        return logits.masked_fill(~torch.from_numpy(keep).to(logits.device), float("-inf"))

    def _allowed(self, row: int, sets, positions: np.ndarray, vocab_start: int, width: int) -> np.ndarray:
        """(K, width) bool: ids [vocab_start, vocab_start + width) (end-of-text among them) that
        keep the canvas of ``sets`` completable at each of its holes ``positions`` (K,)."""
        dfa = self.rows[row].dfa
        classes, eos = allowed_classes(dfa, sets, positions)
        known = len(dfa.token_class)  # ids past the tokenizer: never allowed
        allowed = np.zeros((len(positions), max(known, vocab_start + width)), dtype=bool)
        allowed[:, :known] = classes[:, dfa.token_class]  # (K, ids)
        allowed[:, self.eos_ids] = eos[:, None]
        return allowed[:, vocab_start : vocab_start + width]

    def allowed_ids(self, state, tokens: Tensor, rows: Tensor, cols: Tensor, width: int) -> Tensor:
        """(N, width) bool: the ids below ``width`` (end-of-text among them) that keep the canvas of
        state ``tokens[n]`` (N, L) of canvas row ``rows[n]`` completable when written at its
        window column ``cols[n]``, a hole (every id for a free row). A left-to-right verifier
        (apd, guided) asks this of the draft's prefix before each column: its choice there is
        then the constrained one given what it accepted before."""
        host_cols = cols.tolist()
        host, row_of, spans = self._regions(state, tokens, rows)
        out = np.ones((len(row_of), width), dtype=bool)
        for n, row in enumerate(row_of):
            if self.rows[row] is None:
                continue
            lo, hi = spans[n]
            sets = self._sets(row, host[n, lo:hi])
            if not sets.completable(self.rows[row].state):
                raise RuntimeError(f"row {row}'s accepted prefix no longer holds a word of its constraint")
            out[n] = self._allowed(row, sets, np.array([host_cols[n] + state.bs - lo]), 0, width)[0]
        return torch.from_numpy(out).to(tokens.device)

    def filter_commit(self, state, mask: Tensor, token: Tensor, *, tokens: Tensor | None = None,
                      rows: Tensor | None = None, scores: Tensor | None = None, offset: int | None = None) -> Tensor:
        """``mask`` (N, W) without the commits (or token editing's rewrites) that would make a
        constrained state's canvas uncompletable (see the module's docstring for the order: ``scores`` (N, W); None: left to
        right). Column 0 of ``mask`` is canvas position ``offset`` (default
        the window start; SchED's all-in fill passes the answer start)."""
        offset = state.bs if offset is None else offset
        host_mask = mask.cpu().numpy().copy()
        host_token = token.cpu().numpy()
        host, row_of, spans = self._regions(state, tokens, rows)
        order_by = None if scores is None else scores.float().cpu().numpy()
        changed = False
        for n, row in enumerate(row_of):
            constraint = self.rows[row]
            cols = np.flatnonzero(host_mask[n])
            if constraint is None or len(cols) == 0:
                continue
            lo, hi = spans[n]
            region = host[n, lo:hi].copy()
            cols = cols[(cols + offset >= lo) & (cols + offset < hi)]  # a prompt tail, past the end: not answer
            at = cols + offset - lo
            before = region.copy()  # masks, or the tokens token editing would rewrite
            region[at] = host_token[n, cols]
            if self._completable(row, region):
                continue
            region[at] = before[at]
            order = cols if order_by is None else cols[np.argsort(-order_by[n, cols], kind="stable")]
            for col in order:
                region[col + offset - lo] = host_token[n, col]
                if not self._completable(row, region):
                    region[col + offset - lo] = before[col + offset - lo]
                    host_mask[n, col] = False
                    changed = True
        return torch.from_numpy(host_mask).to(mask.device) if changed else mask

    def completable_ends(self, state, end: Tensor) -> Tensor:
        """(B,) ``end`` with each constrained row's cut dropped (its end kept) where ending the
        answer before ``end`` leaves its canvas without a word (EoTP's truncation)."""
        host, _, spans = self._regions(state)
        wanted, current = end.tolist(), state.end.tolist()
        kept = list(wanted)
        for row, constraint in enumerate(self.rows):
            lo = spans[row][0]
            if constraint is None or wanted[row] >= current[row]:
                continue
            if not self._completable(row, host[row, lo : max(lo, wanted[row])]):
                kept[row] = current[row]
        return end if kept == wanted else torch.tensor(kept, dtype=end.dtype, device=end.device)
