"""The running batch of the scheduler: its rows' progress, their updates, and the rebuild at a
block boundary that lets rows leave and join while every row decodes as its single run.

A row resumed at a block boundary enters a new ``Decoding`` with its finished blocks appended
to its prompt (``RowStart``): left padding puts every row's next block at the same canvas
column, a row with fewer blocks left is truncated, and the row keeps its own random stream
(answer offset, steps taken) and counters. Caches refresh at block starts, so they see the
K/V of a single run. What cannot be exact under a rebuild (stoppers that read the whole
answer, classifier-free guidance over the prompt, a D2F student's prompt block, the pipelined
mode) runs as a static batch: no joins, finished rows only stop.

Block-causal models rebuild only where a model block ends: the prefix then ends on a block of
the model, so the blocks the attention counts back from the answer start are the single run's.
Under blocks counted from position 0, a fresh row's prompt tail leads its answer region; it is
carried with the row's first blocks, and the row's canvas positions past its requested length
in its last block (``extra``) stay on its canvas, as they were in the single run.
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from dllm.api.decided import final_prefix_decided
from dllm.engine.block_alignment import model_block_windows
from dllm.cache.prompt_store import PromptKVStore, attach as attach_prompt_store
from dllm.engine.config import GenerationConfig
from dllm.engine.decoding import Decoding, RowStart
from dllm.serve.protocol import RowUpdate, ServeRequest

# fields that may differ between rows of one batch (steps may differ only with gen_length,
# at the same budget per block)
_PER_ROW = ("gen_length", "steps", "seed")


def batch_key(config: GenerationConfig, model) -> tuple[str, bool]:
    """(key, joinable): requests with equal keys can share a batch; ``joinable`` batches take
    new rows and drop finished ones at block boundaries, exactly."""
    joinable = (config.stopper == "none" and config.cfg_scale == 0 and config.block_add_threshold is None
                and model.config.block_origin != "prompt")
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    for name in _PER_ROW if joinable else ("seed",):
        values.pop(name)
    if joinable:
        values["steps_per_block"] = config.steps_per_block
    return json.dumps(values, sort_keys=True, default=repr), joinable


@dataclass(kw_only=True, eq=False)
class RowProgress:
    """One request's row across the batches it passes through."""

    request: ServeRequest
    on_update: Callable[[RowUpdate], None]
    submitted: float
    admitted: float = 0.0
    prefix: list[int] = field(default_factory=list)  # prompt + finished answer blocks
    done_answer: list[int] = field(default_factory=list)  # finished answer blocks
    remaining: int = 0  # answer positions left of those requested
    extra: int = 0  # canvas positions after them in the row's last block (block-causal leads)
    steps_before: int = 0
    counters: dict[str, int] = field(default_factory=lambda: {"nfe": 0, "token_forwards": 0, "draft_rows": 0})
    seen: list[int] = field(default_factory=list)  # the current batch's canvas of this row, last read
    final: int = 0  # length of the final prefix already sent
    cancelled: bool = False
    finished: bool = False

    def __post_init__(self) -> None:
        self.prefix = list(self.request.prompt_ids)
        self.remaining = self.request.config.gen_length

    def start(self) -> RowStart:
        return RowStart(prefix=self.prefix, gen_length=self.remaining + self.extra, seed=self.request.seed,
                        answer_offset=len(self.done_answer), steps_before=self.steps_before,
                        constraint=self.request.constraint)


class RunningBatch:
    """A ``Decoding`` over some rows, with the bookkeeping to report, drop and add rows."""

    def __init__(self, model, rows: list[RowProgress], config: GenerationConfig, key: str, joinable: bool,
                 prompt_store: PromptKVStore | None = None,
                 text_of: Callable[[list[int]], str] | None = None) -> None:
        # text_of: answer ids to text (``api.decided.answer_decoder``), to stop a row at its stop strings
        self.text_of = text_of
        # the blocks its Decoding runs (a block-causal model's own), which _carry counts in
        self.model, self.config, self.key, self.joinable = model, model_block_windows(model, config), key, joinable
        self.prompt_store = prompt_store  # prompt blocks shared across requests (block-causal models)
        self.mask_id, self.eos = model.mask_token_id, set(model.eos_token_ids)
        # blocks of this batch per block of a block-causal model: it rebuilds where one ends
        self.blocks_per_rebuild = 1
        if model.attention == "block_causal":
            self.blocks_per_rebuild = max(1, model.config.block_size // self.config.block_length)
        self.rows: list[RowProgress] = []
        self.decoding: Decoding | None = None
        self.rebuild(rows)

    @property
    def live(self) -> list[RowProgress]:
        return [r for r in self.rows if not r.finished]

    @property
    def done(self) -> bool:
        return self.decoding is None

    def rebuild(self, joining: list[RowProgress]) -> None:
        """New Decoding from the live rows (resumed at the block about to start) plus ``joining``."""
        old, live = self.decoding, self.live
        if old is not None:
            self._carry(old, live)
        now = time.perf_counter()
        for row in joining:
            row.admitted = now
        self.rows = live + joining
        self.decoding = None
        if self.rows:
            self.decoding = Decoding(self.model, [r.start() for r in self.rows], self.config)
            attach_prompt_store(self.decoding.state, self.prompt_store)
            self._record_logprobs(self.decoding)
            self.block = self.decoding.block
            for row in self.rows:
                row.seen = [self.mask_id] * row.remaining

    def _record_logprobs(self, decoding: Decoding) -> None:
        """Have the engine record committed tokens' logprobs when a row asks for them."""
        tops = [r.request.top_logprobs for r in self.rows if r.request.top_logprobs is not None]
        if tops:
            decoding.record_logprobs(max(tops))

    def _carry(self, old: Decoding, live: list[RowProgress]) -> None:
        """Move the live rows' finished blocks of ``old`` into their prompts, and their counters.
        ``width`` canvas positions are finished; a row whose prompt tail led its answer region
        (``lead``) finished ``width - lead`` of its own answer tokens."""
        block = self.config.block_length
        width = old.block * block
        index = {id(r): i for i, r in enumerate(self.rows)}
        state = old.state
        leads = [0] * len(self.rows) if state.lead is None else state.lead.tolist()
        answer = old.answer().tolist()
        steps = (state.steps_before + state.row_step).tolist()
        for row in live:
            i = index[id(row)]
            done = width - leads[i]
            region = -(-(leads[i] + row.remaining + row.extra) // block) * block  # its canvas answer positions
            row.prefix += answer[i][:done]
            row.done_answer += answer[i][:done]
            row.remaining -= done
            row.extra = region - width - row.remaining
            row.steps_before = steps[i]
            self._add_counters(row, old, i)

    def _add_counters(self, row: RowProgress, decoding: Decoding, i: int) -> None:
        runner = decoding.state.runner
        for name in row.counters:
            row.counters[name] += int(getattr(runner, name)[i])

    def step(self) -> list[tuple[RowProgress, RowUpdate]]:
        """One round of the decode; the updates of the rows it changed (finished ones included)."""
        self.decoding.step()
        return self.read()

    def read(self) -> list[tuple[RowProgress, RowUpdate]]:
        """Updates from the canvas since the last read; rows that ended are marked finished. A row
        cancelled while the step ran ends here and stops in the decoding too (else it would go
        on costing forwards to the end, with nobody to read it)."""
        decoding = self.decoding
        answer = decoding.answer().tolist()
        active = decoding.state.runner.active.tolist()
        # token editing may rewrite a committed token until its window ends: a live row's text is
        # final only before the active window, and its decode ends with the decoding's
        editing = decoding.config.edit_threshold is not None and not decoding.done
        updates, stopping = [], []
        for i, row in enumerate(self.rows):
            if row.finished:
                continue
            segment = answer[i][: row.remaining]
            committed = {len(row.done_answer) + j: t for j, (t, was) in enumerate(zip(segment, row.seen))
                         if was == self.mask_id and t != self.mask_id}
            row.seen = segment
            full = row.done_answer + segment
            final = next((j for j, t in enumerate(full) if t == self.mask_id), len(full))
            open_edits = editing and active[i]
            if open_edits:
                final = min(final, len(row.done_answer) + decoding.window_start(i))
            update = RowUpdate(request_id=row.request.request_id, final_ids=full[row.final : final],
                               committed=committed)
            if row.request.top_logprobs is not None and final > row.final:
                offset = len(row.done_answer)  # this canvas's answer starts after the finished blocks
                update.logprobs = decoding.state.logprobs.read(i, row.final - offset, final - offset,
                                                               row.request.top_logprobs)
            row.final = max(row.final, final)
            ended = self.mask_id not in segment and not open_edits
            if row.cancelled or not active[i] or ended or self._decided(row, full, final):
                self._finish(row, update, decoding, i, full)
                if active[i]:
                    stopping.append(i)
            if update.finished or update.final_ids or update.committed:
                updates.append((row, update))
        if stopping:
            stop = torch.zeros(len(self.rows), dtype=torch.bool, device=decoding.state.tokens.device)
            stop[stopping] = True
            decoding.stop_rows(stop)
        return updates

    def _decided(self, row: RowProgress, full: list[int], final: int) -> bool:
        """The row's final prefix ``full[:final]`` decides its text: it holds a stop, or runs past
        max_tokens with no end-of-text in reach (an end-of-text is ``stop_at_eos``'s to end). The
        rest of its canvas would be forwards for nothing. Read from the answer this round already
        read back; never under token editing, which may still rewrite a committed token."""
        if row.request.config.edit_threshold is not None:
            return False
        stops = row.request.stops
        if stops is not None and (stops.strings or stops.token_ids) and self.text_of is not None:
            # api.decided's reading of the final prefix (max_tokens included), as generate reads it
            return final_prefix_decided(full[:final], self.text_of, list(self.eos), stops, row.request.max_tokens)
        limit = row.request.max_tokens
        return limit is not None and row.final > limit and not any(t in self.eos for t in full[: limit + 1])

    def _finish(self, row: RowProgress, update: RowUpdate, decoding: Decoding, i: int, full: list[int]) -> None:
        row.finished = True
        self._add_counters(row, decoding, i)
        if row.cancelled:
            reason = "cancelled"
        else:
            reason = "eos" if any(t in self.eos for t in full) else "length"
        end = next((j for j, t in enumerate(full) if t in self.eos), None)
        tokens = len(full) if end is None else end + 1
        if reason == "cancelled":
            tokens = row.final
        now = time.perf_counter()
        nfe = row.counters["nfe"]
        update.finished, update.finish_reason = True, reason
        update.stats = {**row.counters, "tokens": tokens, "tpf": tokens / max(nfe, 1),
                        "seconds": now - row.admitted, "queued_seconds": row.admitted - row.submitted}

    def cancel_marked(self) -> list[tuple[RowProgress, RowUpdate]]:
        """Stop the rows marked cancelled now (they cost nothing from here) and report them."""
        if not any(r.cancelled and not r.finished for r in self.rows):
            return []
        return self.read()  # read() ends each cancelled row and stops it in the decoding

    def shapes(self, blocks: int | None = None) -> list[tuple[int, int]]:
        """(prefix tokens, answer positions left) of each row still decoding after ``blocks``
        blocks of this batch (default: the blocks finished so far), as a rebuild would lay it out."""
        if self.decoding is None:
            return []
        width = (self.decoding.block if blocks is None else blocks) * self.config.block_length
        return [(len(r.prefix) + width, r.remaining - width) for r in self.live if r.remaining > width]

    def canvas_size(self) -> tuple[int, int]:
        """(rows, length) of the canvas the running decode holds now."""
        canvas = self.decoding.state.canvas
        return canvas.batch_size, canvas.length

    def at_boundary(self) -> bool:
        """True once the decode ended or reached the start of a new block (no forward in it yet)."""
        return self.decoding.done or self.decoding.block != self.block

    def can_rebuild(self) -> bool:
        """At a boundary where rows may leave and join: every block, or a block-causal model's."""
        return self.joinable and self.decoding.block % self.blocks_per_rebuild == 0

    def next_block(self, joining: list[RowProgress]) -> None:
        """At a boundary: drop finished rows and add ``joining`` (a rebuild), or go on as is."""
        if self.decoding.done:
            for row in self.live:  # every row's blocks are decoded: read() has finished them
                row.finished = True
            self.rows, self.decoding = [], None
            if joining:
                self.rebuild(joining)
            return
        if joining and not self.can_rebuild():
            raise ValueError("rows can join only where can_rebuild() says so")
        if self.can_rebuild() and (joining or len(self.live) < len(self.rows)):
            self.rebuild(joining)
        if self.decoding is not None:
            self.block = self.decoding.block
