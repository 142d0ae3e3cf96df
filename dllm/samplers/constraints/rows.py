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

from dllm.samplers.constraints.canvas import (allowed_classes, canvas_sets, completable, completable_between,
                                              position_kinds)
from dllm.samplers.constraints.token_dfa import TokenDFA


_NUMPY_FLOATS = (torch.float16, torch.float32, torch.float64)  # logits dtypes numpy holds


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
        # row -> (kinds, sets) of the last canvas whose sets were computed: a commit filter's trial,
        # and the next step's canvas, differ from it in the window only, so they walk only there
        # (canvas.completable_between, canvas_sets(held=)); a grammar's sets hand their Earley chart
        # on to the next canvas's parse, which resumes it from the first change (token_grammar.py)
        self._held: dict[int, tuple[np.ndarray, object]] = {}
        self._columns: dict[tuple, Tensor] = {}  # (row's dfa, vocab_start, width, device) -> id's column

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

    def _kinds(self, row: int, region: np.ndarray) -> np.ndarray:
        constraint = self.rows[row]
        return position_kinds(constraint.dfa, region, self.mask_id, self.eos_ids, constraint.limit)

    def _sets(self, row: int, region: np.ndarray):
        constraint = self.rows[row]
        kinds = self._kinds(row, region)
        sets = canvas_sets(constraint.dfa, kinds, constraint.state, constraint.limit, self._held.get(row))
        self._held[row] = (kinds, sets)
        return sets

    def _completable(self, row: int, region: np.ndarray) -> bool:
        constraint, kinds = self.rows[row], self._kinds(row, region)
        held = self._held.get(row)
        if not isinstance(constraint.dfa, TokenDFA):  # a grammar's parse resumes the held chart
            return self._sets(row, region).completable(constraint.state)
        if held is not None and len(held[0]) == len(kinds):
            changed = np.flatnonzero(held[0] != kinds)
            if len(changed) == 0:
                return held[1].completable(constraint.state)
            return completable_between(constraint.dfa, held[1], kinds, changed[0], changed[-1] + 1)
        return completable(constraint.dfa, kinds, constraint.state, constraint.limit)

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
        drop = None  # (N, W, V) bool: the ids masked, on the logits' device
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
            if drop is None:
                drop = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device)
            kept = self._allowed(row, sets, cols + state.bs - lo, vocab_start, logits.shape[-1], logits.device)
            if drop.device.type == "cpu":  # numpy writes rows of a host array several times faster than torch
                drop.numpy()[n, cols] = ~kept.numpy()
            else:  # the host copies (cols, _allowed's table) wait on a queue the .cpu() above already drained
                drop[n, torch.from_numpy(cols).to(drop.device)] = ~kept
        if drop is None:
            return logits
        if drop.device.type == "cpu" and logits.dtype in _NUMPY_FLOATS:  # a new tensor: callers keep theirs
            out = logits.detach().numpy().copy()  # numpy's putmask is about twice torch's masked_fill on the host
            np.putmask(out, drop.numpy(), -np.inf)
            return torch.from_numpy(out)
        return logits.masked_fill(drop, float("-inf"))

    def _allowed(self, row: int, sets, positions: np.ndarray, vocab_start: int, width: int,
                 device: torch.device) -> Tensor:
        """(K, width) bool on ``device``: ids [vocab_start, vocab_start + width) (end-of-text among
        them) that keep the canvas of ``sets`` completable at each of its holes ``positions`` (K,).
        Decided per token class on the host ((K, C + 2): the classes, end-of-text, never) and
        spread over the ids through each id's column (on the device, off the host, for a GPU)."""
        classes, eos = allowed_classes(self.rows[row].dfa, sets, positions)
        if not isinstance(self.rows[row].dfa, TokenDFA):  # a grammar's classes are the ids: a slice, not a gather
            return torch.from_numpy(self._id_slice(classes, eos, vocab_start, width)).to(device)
        per_column = np.zeros((len(positions), classes.shape[1] + 2), dtype=bool)
        per_column[:, : classes.shape[1]] = classes
        per_column[:, classes.shape[1]] = eos
        columns = self._id_columns(row, vocab_start, width, device)
        if columns.device.type == "cpu":  # numpy's gather is several times torch's on the host
            return torch.from_numpy(np.take(per_column, columns.numpy(), axis=1))
        return torch.from_numpy(per_column).to(device)[:, columns]

    def _id_slice(self, allowed: np.ndarray, eos: np.ndarray, vocab_start: int, width: int) -> np.ndarray:
        """(K, width) bool: ids [vocab_start, vocab_start + width) from a grammar's (K, V) allowed
        ids, end-of-text's as ``eos`` (K,), none past V (what ``_id_columns``' gather gives, as a
        copy of one slice: on a 151k vocabulary the gather was ~17 ms a row on the host)."""
        kept = np.zeros((len(allowed), width), dtype=bool)
        stop = min(vocab_start + width, allowed.shape[1])
        if stop > vocab_start:
            kept[:, : stop - vocab_start] = allowed[:, vocab_start:stop]
        ids = self.eos_ids[(self.eos_ids >= vocab_start) & (self.eos_ids < vocab_start + width)]
        kept[:, ids - vocab_start] = eos[:, None]
        return kept

    def _id_columns(self, row: int, vocab_start: int, width: int, device: torch.device) -> Tensor:
        """(width,) the column of each id [vocab_start, vocab_start + width) in ``_allowed``'s
        per-column table: its token class, C for end-of-text, C + 1 (never) past the tokenizer.
        Built once per decode, row's language and device."""
        dfa = self.rows[row].dfa
        key = (id(dfa), vocab_start, width, str(device))
        if key not in self._columns:
            C, known = dfa.table.shape[1], len(dfa.token_class)  # a token DFA's (a grammar's: _id_slice)
            columns = np.full(max(known, vocab_start + width), C + 1, dtype=np.int64)
            columns[:known] = dfa.token_class
            columns[self.eos_ids] = C
            self._columns[key] = torch.from_numpy(columns[vocab_start : vocab_start + width]).to(device)
        return self._columns[key]

    def allowed_ids(self, state, tokens: Tensor, rows: Tensor, cols: Tensor, width: int) -> Tensor:
        """(N, width) bool: the ids below ``width`` (end-of-text among them) that keep the canvas of
        state ``tokens[n]`` (N, L) of canvas row ``rows[n]`` completable when written at its
        window column ``cols[n]``, a hole (every id for a free row). A left-to-right verifier
        (apd, guided) asks this of the draft's prefix before each column: its choice there is
        then the constrained one given what it accepted before."""
        host_cols = cols.tolist()
        host, row_of, spans = self._regions(state, tokens, rows)
        out = torch.ones((len(row_of), width), dtype=torch.bool, device=tokens.device)
        for n, row in enumerate(row_of):
            if self.rows[row] is None:
                continue
            lo, hi = spans[n]
            sets = self._sets(row, host[n, lo:hi])
            if not sets.completable(self.rows[row].state):
                raise RuntimeError(f"row {row}'s accepted prefix no longer holds a word of its constraint")
            out[n] = self._allowed(row, sets, np.array([host_cols[n] + state.bs - lo]), 0, width, tokens.device)[0]
        return out

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
