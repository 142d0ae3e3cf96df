"""The pipelined mode of block-causal models (D2F, Discrete Diffusion Forcing; Wang et al. 2025).

Blocks decode in a pipeline instead of one at a time. Each row has its own pipeline: a new
masked block joins when the row's last block has decoded ``block_add_threshold`` of its tokens;
a block is *fully active* once its predecessor has decoded ``decoded_token_threshold`` of its
own (the block after the prompt always is), else *semi-active*. Per round and block, a
semi-active block commits only what passes the rule's threshold (possibly nothing), a fully
active one what the rule commits (the threshold, or else its best position). A block is
finished when it has no mask; every block before a row's first unfinished one is final.

How it sits in the engine: the decode runs one window over the whole answer (``Decoding``
replaces ``block_length`` by ``gen_length``) and ``Pipelined`` wraps the strategy: before each
round it narrows the state's window to the blocks in flight (over the batch: from the earliest
unfinished block to the last one added) and sets ``state.window_mask`` so each row decides only
its own blocks in flight; the rule is applied block by block (``PipelineRule``: each block a row
of the rule's input, so floors, quotas and thresholds are per block); afterwards the window is the
whole answer again, so the engine's "does a row still move?" sees the blocks not yet added.
Because the model is block-causal, a block's logits depend only on it and the blocks before it:
blocks not yet added cost nothing but query positions and cannot change what the pipeline sees.

The cache (``AppendCache``, every cache but ``none``) is D2F's: each forward starts where the
exact K/V ends, so blocks finished since the last forward are recomputed with their final tokens
and their K/V appended; blocks in flight are recomputed every round and never kept.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from dllm.cache.kv import KVBuffers
from dllm.runner.model_runner import ModelRunner
from dllm.samplers.base import RuleInput


class AppendCache:
    """D2F's K/V cache: [0, exact_end) final; a forward runs from there to the window's end.

    Candidate forwards (LoPA's branches, on a row-selected copy) also leave the blocks before the
    window final in every candidate, so their K/V goes back to each row present among the
    candidates and ``exact_end`` moves for candidate forwards; a canvas forward starts from
    ``canvas_end``, how far every row's K/V is known final (a branch-parallel rank sees only its
    own rows' candidates)."""

    def __init__(self) -> None:
        self.kv: KVBuffers | None = None
        self.exact_end = self.canvas_end = 0
        self.peak_bytes = 0

    def block_logits(self, runner: ModelRunner, tokens: Tensor, bs: int, be: int, step: int,
                     rows: Tensor | None = None, count: Tensor | None = None) -> Tensor:
        if self.kv is None:
            self.kv = KVBuffers.allocate(runner.model, runner.canvas.batch_size, runner.canvas.length,
                                         graphs=runner.graphs)
        kv = self.kv if rows is None else self.kv.select(rows, runner.graphs)
        self.peak_bytes = max(self.peak_bytes, self.kv.nbytes + (kv.nbytes if rows is not None else 0))
        shift = int(runner.shift_logits)
        start = min(self.exact_end if rows is not None else self.canvas_end, bs - shift)
        end = runner.model_blocks(bs, be)[1]
        first = bs - shift - start
        logits = runner.forward(tokens[:, start:end], start, cache=kv, rows=rows, count=count,
                                logits_for=(first, first + be - bs))
        final = runner.model_blocks(bs, be)[0]  # every row's blocks before bs are final
        if rows is None:
            self.exact_end = self.canvas_end = final
        elif final > start:
            self._write_back(kv, rows, start, final)
            self.exact_end = final
        return logits

    def _write_back(self, kv: KVBuffers, rows: Tensor, start: int, end: int) -> None:
        """K/V of [start, end) from each row's first candidate into the row (rows with no
        candidate keep theirs; no host read)."""
        B, C = self.kv.layers[0][0].shape[0], rows.shape[0]
        first = torch.full((B,), C, dtype=torch.long, device=rows.device)
        first.scatter_reduce_(0, rows, torch.arange(C, device=rows.device), "amin")
        present = (first < C)[:, None, None, None]
        pick = first.clamp_max(C - 1)
        for (k, v), (ck, cv) in zip(self.kv.layers, kv.layers):
            for main, copy in ((k, ck), (v, cv)):
                part = main[:, :, start:end]
                part.copy_(torch.where(present, copy[pick][:, :, start:end], part))


@dataclass(frozen=True)
class Grown:
    """Candidate states after each added its own block (``Pipelined.grow``)."""

    added: Tensor  # (C,) blocks in each candidate's pipeline
    window_mask: Tensor  # (C, W) each candidate's blocks in flight over the widest window
    be: int  # end of that window: one block past the round's, where the answer has one


class PipelineRule:
    """The rule applied block by block: fully active blocks take the rule's commits, semi-active
    ones only what passes its threshold (``rule.passes``)."""

    def __init__(self, rule, pipeline: "Pipelined") -> None:
        self.rule, self.pipeline = rule, pipeline
        self.reads_eligible_only = getattr(rule, "reads_eligible_only", False)

    def __call__(self, inp: RuleInput) -> Tensor:
        N, W = inp.eligible.shape
        size = self.pipeline.size
        K = W // size
        blocks = RuleInput(stats=inp.stats.reshape(N * K, size), eligible=inp.eligible.reshape(N * K, size),
                           step=0, num_steps=size, block_masks=torch.full((N * K,), size, device=inp.eligible.device))
        full = self.pipeline.full_in_window
        full = full.repeat_interleave(N // full.shape[0], 0).reshape(-1)  # candidate states: K per row
        commit = torch.where(full[:, None], self.rule(blocks), self.rule.passes(blocks))
        return commit.reshape(N, W)


def check_pipeline_rule(rule, name: str) -> None:
    """The pipeline's semi-active blocks need the rule's threshold without its floor."""
    passes = getattr(rule, "passes", None)
    if passes is None or getattr(rule, "tau", 0) is None:
        raise ValueError(f"the pipelined mode (block_add_threshold) needs a rule with a threshold: 'threshold', "
                         f"'entropy_threshold' or 'low_confidence' with tau (D2F's skip_threshold), not {name!r}")


class Pipelined:
    """A strategy run on the blocks in flight (see the module docstring)."""

    def __init__(self, inner, state, block_length: int) -> None:
        model, config = state.model, state.config
        if model.attention != "block_causal":
            raise ValueError("the pipelined mode (block_add_threshold) needs a block-causal model (a D2F student, "
                             "Fast-dLLM v2, SDAR, LLaDA2, dllm-waitingline-bd); this one attends bidirectionally")
        check_pipeline_rule(state.rule, config.policy)
        self.inner, self.size = inner, block_length
        self.candidate_rows = getattr(inner, "candidate_rows", 1)
        self.add, self.decoded = config.block_add_threshold, config.decoded_token_threshold
        B = state.canvas.batch_size
        self.num_blocks = config.gen_length // block_length
        self.added = torch.zeros(B, dtype=torch.long, device=state.tokens.device)  # blocks in each row's pipeline
        self.full = torch.zeros(B, self.num_blocks, dtype=torch.bool, device=state.tokens.device)
        self.lo = self.hi = 0  # the round's window [lo, hi) in blocks
        if hasattr(inner, "pipeline"):  # LoPA: its candidates add their own blocks (grow)
            inner.pipeline = self
        state.rule = PipelineRule(state.rule, self)
        if config.cache != "none":
            state.cache = AppendCache()

    @property
    def full_in_window(self) -> Tensor:
        """(B, K) whether each block of this round's window is fully active."""
        return self._full_window

    def _blocks(self, state, tokens: Tensor | None = None, rows: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(N, num_blocks) masks left per block of ``tokens`` (default: the canvas), and whether
        each block holds an end-of-text; ``rows``: the canvas row of each (for its prompt tail).
        A prompt tail is decided prompt: a mask id or an end-of-text in it counts as neither (a
        mask id counted as a mask would keep its block unfinished and the next one semi-active)."""
        P, G = state.canvas.prompt_width, self.num_blocks * self.size
        tokens = state.tokens if tokens is None else tokens
        answer = tokens[:, P: P + G]
        masked, eos = state.answer_masks(tokens, rows)[:, :G], torch.isin(answer, state.eos)
        if state.lead_mask is not None:
            lead = state.lead_mask if rows is None else state.lead_mask[rows]
            eos &= ~lead[:, :G]
        shape = (answer.shape[0], self.num_blocks, self.size)
        return masked.reshape(shape).sum(-1), eos.reshape(shape).any(-1)

    def _added(self, state, masks: Tensor, eos: Tensor, added: Tensor, active: Tensor) -> Tensor:
        """Blocks in each pipeline after this round's add: one more where the last block added has
        decoded ``block_add_threshold`` (the prompt counts as decoded), none after an end-of-text
        in a block already added. End-of-text past an EoTP truncation, in blocks not yet added,
        does not count: the position that predicted the end may still be masked in such a block,
        and it must be added to be decoded."""
        share = 1 - masks.float() / self.size  # decoded share of each block
        index = torch.arange(self.num_blocks, device=masks.device)
        eos = (eos & (index < added[:, None])).any(-1)
        last = share.gather(1, (added - 1).clamp_min(0)[:, None])[:, 0]
        last = torch.where(added == 0, torch.ones_like(last), last)  # the prompt is decoded
        stop = eos & state.config.stop_at_eos  # D2F adds no block after an end-of-text
        added = added + (active & (added < self.num_blocks) & ~stop & (last >= self.add)).long()
        # Leading blocks with no mask are decided prompt tail (an aligned row's lead fills whole
        # blocks when block_length is below the model's block): the block after them joins too, so
        # a row always has one in flight. A no-op otherwise (the rule above already added it).
        decided = (masks == 0).int().cumprod(1).sum(1)
        reach = (decided + 1).clamp_max(self.num_blocks)
        return torch.where(active & ~stop, torch.maximum(added, reach), added)

    def _advance(self, state) -> tuple[int, int]:
        """Add blocks (unless the strategy's candidates add their own, ``grows_blocks``), mark
        fully active ones and return the round's block range [lo, hi)."""
        masks, eos = self._blocks(state)
        share = 1 - masks.float() / self.size  # decoded share of each block
        active = state.runner.active
        if not getattr(self.inner, "grows_blocks", False):
            self.added = self._added(state, masks, eos, self.added, active)
        before = torch.cat([torch.ones_like(share[:, :1]), share[:, :-1]], 1)  # the predecessor's share
        self.full = before >= self.decoded
        index = torch.arange(self.num_blocks, device=masks.device)
        flight = (index < self.added[:, None]) & (masks > 0) & active[:, None]
        some = flight.any(-1)
        first = torch.where(some, flight.int().argmax(-1), self.num_blocks)
        last_added = torch.where(some, self.added, 0)
        lo, hi = torch.stack([first.min(), last_added.max()]).tolist()  # the round's one host read
        if lo >= hi:
            raise RuntimeError("pipelined decode: a row still moves but has no block in flight")
        self.in_flight = (index[lo:hi] < self.added[:, None])
        self.lo, self.hi = lo, hi
        return lo, hi

    def grow(self, state, tokens: Tensor, rows: Tensor) -> Grown:
        """Candidate states (C, L) of canvas ``rows`` (C,) each add their own block, as LoPA's
        released loop adds one per branch before its forward: their pipelines, and their blocks in
        flight over the round's window widened by one block (no host read)."""
        masks, eos = self._blocks(state, tokens, rows)
        added = self._added(state, masks, eos, self.added[rows], state.runner.active[rows])
        hi = min(self.hi + 1, self.num_blocks)
        index = torch.arange(self.lo, hi, device=tokens.device)
        flight = (index < added[:, None]).repeat_interleave(self.size, 1)
        return Grown(added=added, window_mask=flight, be=state.canvas.prompt_width + hi * self.size)

    def step(self, state):
        P, G = state.canvas.prompt_width, state.config.gen_length
        lo, hi = self._advance(state)
        self._full_window = self.full[:, lo:hi]
        state.bs, state.be = P + lo * self.size, P + hi * self.size
        state.window_mask = self.in_flight.repeat_interleave(self.size, 1)
        try:
            return self.inner.step(state)
        finally:
            state.bs, state.be, state.window_mask = P, P + G, None

    def blocks_in_flight(self, state, row: int) -> list[tuple[int, int]]:
        """Answer-region spans [start, end) of ``row``'s blocks in flight after a round: from its
        first block with a mask to its last block added (the decode order view)."""
        masks = self._blocks(state)[0][row].tolist()
        added = int(self.added[row])
        first = next((k for k in range(added) if masks[k]), added)
        return [(k * self.size, (k + 1) * self.size) for k in range(first, added)]
