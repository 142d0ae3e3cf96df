"""The decode loop: canvas -> blocks -> steps, one paragraph per step.

``Decoding`` is the loop made resumable: ``step()`` runs one strategy round, so ``decode()``,
``DiffusionLM.stream`` and the serving scheduler drive the same loop. Per step: the strategy asks the cache for the active block's logits (the cache refreshes when
due) -> one kernel call turns them into statistics -> the rule picks positions -> commit ->
end-of-text bookkeeping and stats. Rules, strategies, stoppers and caches are looked up by name
from the GenerationConfig; nothing here branches on the model family.
"""
from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from dllm.engine.block_alignment import align_rows, alignment_unit, model_block_windows, tail_tokens
from dllm.cache import make_cache
from dllm.runner.canvas import Canvas, build_canvas
from dllm.runner import graphs
from dllm.engine.config import GenerationConfig
from dllm.kernels import StatsScratch, TokenStats, confidence_stats
from dllm.engine.logprobs import CommitLogprobs, check_logprobs
from dllm.engine.memory import check_memory_budget, plan_memory
from dllm.engine.uniform_state import uniform_state_config
from dllm.runner.model_runner import ModelRunner
from dllm.samplers import make_rule, make_stopper, make_strategy
from dllm.samplers.base import RuleInput
from dllm.samplers.constraints import CanvasConstraints, RowConstraint, check_supported
from dllm.samplers.noise import RowNoise
from dllm.samplers.rules.first_token import FirstTokenFromRefresh
from dllm.samplers.stoppers.span import AnswerStats, AnswerView


@dataclass(kw_only=True, slots=True)
class DecodeResult:
    """Per-row outcome of one batched decode. Tensors are on the model's device."""

    answer: Tensor  # (B, G) committed answer tokens (end-of-text filled after a row stopped)
    order: Tensor  # (B, G) forward index at which each position was committed (-1: auto-filled)
    nfe: Tensor  # (B,) forwards charged to each row
    token_forwards: Tensor  # (B,) query tokens processed for each row
    draft_rows: Tensor  # (B,) rows forwarded for each row (> nfe for FreeDave / LoPA)
    wall_time: float  # seconds for the whole batch (synchronised on GPU)
    row_seconds: list[float]  # each row's own latency: from the start to its last commit / stop
    memory: dict[str, int]  # the MemoryPlan's bytes plus kv_cache_peak_bytes really allocated
    edits: Tensor | None = None  # (B,) answer positions rewritten by token editing (None: off)
    logprobs: CommitLogprobs | None = None  # committed tokens' logprobs (None: not recorded)


class DecodeState:
    """Everything a strategy needs at one step of the active block."""

    def __init__(self, model, canvas: Canvas, config: GenerationConfig,
                 seeds: list[int] | None = None) -> None:
        self.model, self.canvas, self.config = model, canvas, config
        self.mask_id = model.mask_token_id
        # this rank's TensorShard when the logits are a vocabulary shard; None: whole rows (one
        # process, or a family that keeps its vocabulary whole under tensor parallelism)
        self.tp = getattr(model, "tensor_parallel", None)
        self.runner = ModelRunner(model, canvas, cfg_scale=config.cfg_scale, compile=config.compile,
                                  cuda_graphs=config.cuda_graphs)
        self.cache = make_cache(config.cache, **config.cache_options())
        self.rule = make_rule(config.policy, config.policy_args)
        self.stopper = make_stopper(config.stopper, config.stopper_args)
        device = canvas.tokens.device
        self.excluded = torch.tensor([self.mask_id], device=device)
        self.stats_scratch = StatsScratch()  # the CPU statistics' work buffers, reused every step
        self.eos = torch.tensor(model.eos_token_ids, device=device)
        self.fill_id = model.eos_token_ids[0]  # written after a row's end (a Python int: no device read)
        B, G = canvas.batch_size, config.gen_length
        # Each row's random numbers (sampling noise, random rules) come from its own stream:
        # its seed, its own step count and the answer position, never its place in the batch.
        seeds = [config.seed] * B if seeds is None else seeds
        self.row_seed = torch.tensor(seeds, dtype=torch.long, device=device)  # the hash folds them
        self.order = torch.full((B, G), -1, dtype=torch.long, device=device)
        # step: rounds (strategy steps) in the active window; row_step: base-rule steps each row
        # took in it (rules' schedules read these); steps_before: each row's steps in earlier windows
        self.bs = self.be = self.step = self.forwards = 0
        self.row_step = torch.zeros(B, dtype=torch.long, device=device)
        self.steps_before = torch.zeros_like(self.row_step)
        # answer positions each row had already decoded before this canvas (a resumed row's
        # finished blocks sit in its prompt): its noise is keyed by its true answer positions
        self.answer_offset = torch.zeros_like(self.row_step)
        self.block_masks = torch.zeros(canvas.batch_size, dtype=torch.long, device=device)
        # EoTP: each row's answer ends before canvas position end[row]; forwards stop at the
        # furthest end over active rows (recomputed before the next forward after a truncate()).
        self.end = torch.full((canvas.batch_size,), canvas.length, dtype=torch.long, device=device)
        self._truncated = self._ends_moved = False
        # SchED / Prophet / EoTP read statistics of the whole answer, not only the window
        self.runner.keep_last = bool(getattr(self.stopper, "needs_answer_stats", False))
        self.answer_view = (AnswerView(canvas.batch_size, G, self.mask_id, device)
                            if self.runner.keep_last else None)
        for part in (self.rule, self.stopper):  # e.g. a Learn2PD filter's width vs the window
            check = getattr(part, "check_config", None)
            if check is not None:
                check(config)
        if getattr(self.cache, "first_token", "rule") == "argmax":  # Fast-dLLM's block start
            self.rule = FirstTokenFromRefresh(self.rule, self)
        # whether a step reads statistics of eligible (masked) window positions only: then the
        # LM head may skip the committed ones (dllm/runner/model_runner.py head_rows_pay_off)
        # token editing (LLaDA2.1): decided window positions may be rewritten, so the head reads
        # them too; a row whose window has no mask left takes up to max_post_steps edit forwards
        self.editing = config.edit_threshold is not None
        self.edits = torch.zeros(B, dtype=torch.long, device=device)  # positions rewritten per row
        self.post_steps = torch.zeros_like(self.edits)  # edit forwards in the window after its masks
        self.post_open = torch.ones(B, dtype=torch.bool, device=device)  # the last one edited
        self.reads_eligible_only = not self.editing and all(getattr(part, "reads_eligible_only", False)
                                                            for part in (self.rule, self.stopper))
        self.logprobs: CommitLogprobs | None = None  # set by a caller that reports logprobs
        self.lead_mask: Tensor | None = None  # (B, G) prompt-tail positions of the answer region
        self.lead: Tensor | None = None  # (B,) their count per row
        self.window_mask: Tensor | None = None  # (B, W) window positions a row may decide (pipeline)
        self.constraints: CanvasConstraints | None = None  # structured output: None when no row is constrained
        # the canvas's eligible positions and what they were computed from: (bs, be, window_mask,
        # lead_mask, mask); the methods below that write canvas tokens drop it (``_wrote``)
        self._eligible: tuple | None = None

    @property
    def tokens(self) -> Tensor:
        return self.canvas.tokens

    # --- what strategies call -------------------------------------------------------------
    def block_logits(self, tokens: Tensor | None = None, rows: Tensor | None = None,
                     count: Tensor | None = None, head_rows: Tensor | None = None) -> Tensor:
        """Logits (N, W, V) of the active block for ``tokens`` (default: the canvas).

        By default the forward is charged only to active rows that still have masks in the
        window: a row waiting for the rest of the batch to finish a block spends nothing, so a
        batch's NFE equals its rows' single-run NFE under adaptive rules too. ``head_rows``
        (N, W) bool: the only positions whose logits the caller reads (others may be zeros)."""
        tokens = self.tokens if tokens is None else tokens
        if count is None:
            count = self.moving_rows() if self.editing else self.eligible().any(-1)
        if self._ends_moved:
            ends = torch.where(self.runner.active, self.end, 0)
            self.runner.live_end = max(self.be, int(ends.max()))
            self._ends_moved = False
        self.runner.head_rows = head_rows
        try:
            logits = self.cache.block_logits(self.runner, tokens, self.bs, self.be, self.step, rows, count)
        finally:
            self.runner.head_rows = None
        self.forwards += 1
        if self.logprobs is not None:
            self.logprobs.saw(logits, rows, self.canvas.batch_size, self.tp)
        return logits

    def statistics(self, logits: Tensor, rows: Tensor | None = None, steps: Tensor | None = None,
                   tokens: Tensor | None = None) -> TokenStats:
        """One kernel call: (N, W, V) logits -> TokenStats with (N, W) fields.

        ``rows`` (N,): the canvas row of each input (default: the canvas rows); ``steps`` (N,):
        the window step of the state each input holds (default: its row's ``row_step``), e.g.
        FreeDave's draft k sits k steps ahead; ``tokens`` (N, L): the states forwarded (default:
        the canvas), which a constrained row's mask is decided on. At temperature > 0 the noise
        of each position is keyed by its row's seed and that state's step count and answer position."""
        if self.constraints is not None:  # candidates that keep each state's canvas completable only
            if rows is not None and tokens is None:
                raise ValueError("statistics of candidate states under a constraint need their tokens")
            start = 0 if self.tp is None else self.tp.vocab_range(self.model.config.vocab_size)[0]
            logits = self.constraints.mask_logits(self, logits, tokens, rows, vocab_start=start)
        N, W, V = logits.shape
        flat = logits.reshape(N * W, V)
        if self.config.top_k is not None or self.config.top_p is not None:
            flat = (_filter_logits(flat, self.config.top_k, self.config.top_p) if self.tp is None
                    else self.tp.filter_logits(flat, self.config.top_k, self.config.top_p))
        noise = {}
        if self.config.temperature > 0:
            key = self.noise(rows, steps)
            noise = dict(seed=key.seed[:, None].expand(N, W).reshape(-1), counter=key.counters().reshape(-1))
        stats = self.row_statistics(flat, temperature=self.config.temperature, scratch=self.stats_scratch, **noise)
        stats = stats.reshape(N, W)
        if self.constraints is not None and rows is None:
            self.constraints.scores = stats.prob  # the order in which the canvas's commits are tried
        return stats

    def row_statistics(self, flat: Tensor, *, temperature: float = 0.0, scratch: StatsScratch | None = None,
                       **noise) -> TokenStats:
        """(R, V) logits -> TokenStats (R,) over the whole vocabulary, the mask id excluded: one
        kernel call; under tensor parallelism (``flat`` is then the rank's vocabulary shard)
        partial statistics and one small exchange (``TensorShard.statistics``)."""
        if self.tp is not None:
            return self.tp.statistics(flat, vocab=self.model.config.vocab_size, temperature=temperature,
                                 excluded_ids=self.excluded, **noise)
        return confidence_stats(flat, temperature=temperature, excluded_ids=self.excluded, scratch=scratch, **noise)

    def noise(self, rows: Tensor | None = None, steps: Tensor | int | None = None) -> RowNoise:
        """The random stream of the states in ``rows`` (default: the canvas rows) that took
        ``steps`` (default: their row's ``row_step``) base steps in this window."""
        rows = torch.arange(self.row_step.shape[0], device=self.row_step.device) if rows is None else rows
        steps = self.row_step[rows] if steps is None else torch.as_tensor(steps, device=rows.device).expand(rows.shape)
        window = torch.arange(self.bs, self.be, device=rows.device) - self.canvas.prompt_width
        positions = window[None, :] + self.answer_offset[rows][:, None]
        return RowNoise(seed=self.row_seed[rows], clock=self.steps_before[rows] + steps, positions=positions)

    def eligible(self, tokens: Tensor | None = None) -> Tensor:
        """(N, W) bool: the window positions of ``tokens`` (default: the canvas) a step may decide,
        masks outside a prompt tail (and, pipelined, inside the row's blocks in flight). The
        canvas's is computed once until its tokens or the window change (a round reads it from
        the forward's charge to the commit), so callers must not write into it."""
        if tokens is None or tokens is self.tokens:
            held = self._eligible
            if (held is not None and held[0] == self.bs and held[1] == self.be and held[2] is self.window_mask
                    and held[3] is self.lead_mask):
                return held[4]
            eligible = self._eligible_in(self.tokens)
            self._eligible = (self.bs, self.be, self.window_mask, self.lead_mask, eligible)
            return eligible
        return self._eligible_in(tokens)

    def _wrote(self) -> None:
        """Canvas tokens changed: the canvas's eligible positions are computed again when read."""
        self._eligible = None

    def _eligible_in(self, tokens: Tensor) -> Tensor:
        eligible = tokens[:, self.bs : self.be] == self.mask_id
        if self.window_mask is not None:  # pipelined mode: each row's own blocks in flight
            eligible &= self.window_mask.repeat_interleave(eligible.shape[0] // self.window_mask.shape[0], 0)
        if self.lead_mask is not None:  # a prompt tail is prompt, even a mask id in it
            offset = self.bs - self.canvas.prompt_width
            lead = self.lead_mask[:, offset : offset + eligible.shape[1]]
            eligible &= ~lead.repeat_interleave(eligible.shape[0] // lead.shape[0], 0)
        return eligible

    def answer_masks(self, tokens: Tensor | None = None, rows: Tensor | None = None) -> Tensor:
        """(N, G) the masks left in the answer region of ``tokens`` (default: the canvas) of canvas
        ``rows`` (default: states row-major, K per canvas row). A prompt tail is prompt: a mask id
        in it is no mask, so it never keeps a block unfinished or a text from being final."""
        answer = (self.tokens if tokens is None else tokens)[:, self.canvas.prompt_width :]
        masked = answer == self.mask_id
        if self.lead_mask is not None:
            lead = self.lead_mask if rows is None else self.lead_mask[rows]
            masked &= ~lead.repeat_interleave(answer.shape[0] // lead.shape[0], 0)
        return masked

    def rule_input(self, stats: TokenStats, tokens: Tensor | None = None,
                   rows: Tensor | None = None, step: Tensor | None = None) -> RuleInput:
        """What the rule sees for the states ``tokens`` of canvas ``rows`` (default: the canvas)
        at window ``step`` per state (default: each row's own ``row_step``)."""
        block_masks = self.block_masks if rows is None else self.block_masks[rows]
        step = (self.row_step if rows is None else self.row_step[rows]) if step is None else step
        return RuleInput(stats=stats, eligible=self.eligible(tokens), step=step,
                         num_steps=self.config.steps_per_block, block_masks=block_masks,
                         noise=functools.partial(self.noise, rows, step))

    def keep_completable(self, mask: Tensor, token: Tensor, tokens: Tensor | None = None,
                         rows: Tensor | None = None, scores: Tensor | None = None) -> Tensor:
        """``mask`` (N, W) of commits of ``token`` to the states ``tokens`` (default: the canvas) of
        canvas ``rows``, less those that would leave a constrained state's canvas without a word
        (tried most ``scores`` first; dllm/samplers/constraints/rows.py). Unchanged with no
        constrained row: a constrained base step is the rule's step through this filter."""
        if self.constraints is None:
            return mask
        active = self.runner.active if rows is None else self.runner.active[rows]
        mask = mask & self.eligible(tokens) & active[:, None]
        return self.constraints.filter_commit(self, mask, token, tokens=tokens, rows=rows, scores=scores)

    def commit(self, mask: Tensor, token: Tensor) -> None:
        """Write ``token`` where ``mask`` (B, W) is set, for active rows only."""
        mask = mask & self.eligible() & self.runner.active[:, None]
        if self.constraints is not None:  # together, the commits must keep each canvas completable
            # most probable first by the last canvas statistics (the plain step's); a candidate
            # strategy's chosen state keeps the canvas completable whole and needs no order
            scores = self.constraints.scores
            scores = scores if scores is not None and scores.shape == mask.shape else None
            mask = self.constraints.filter_commit(self, mask, token, scores=scores)
        block = self.tokens[:, self.bs : self.be]
        block.copy_(torch.where(mask, token, block))  # no boolean indexing: no host sync on a GPU
        self._wrote()
        offset = self.bs - self.canvas.prompt_width
        self.order[:, offset : offset + mask.shape[1]].masked_fill_(mask, self.forwards)
        if self.logprobs is not None:
            self.logprobs.committed(mask, token, offset, self.lead)

    def edit(self, decided: Tensor, stats: TokenStats) -> None:
        """Token editing: rewrite the window positions ``decided`` (B, W) before this step in the
        rows this step moved (not a prompt tail) whose forward token differs and whose
        probability passes edit_threshold, never past the row's end (a ragged batch's shorter
        answer, an EoTP cut: end-of-text fill, not answer); a constrained row's rewrites go
        through the commit filter (most probable first), so its canvas stays completable.
        An edit is seen like a commit (order, logprobs); rows count their edits. A row that had
        no mask at this step and edited nothing ends its window's editing."""
        window = self.tokens[:, self.bs : self.be]
        offset = self.bs - self.canvas.prompt_width
        inside = torch.arange(self.bs, self.be, device=window.device)[None, :] < self.end[:, None]
        editable = decided & inside & self.runner.active[:, None]
        if self.lead_mask is not None:
            editable &= ~self.lead_mask[:, offset : offset + window.shape[1]]
        edit = editable & (stats.prob > self.config.edit_threshold) & (stats.token != window)
        if self.constraints is not None:  # a constrained row rewrites only what keeps a word in reach
            edit = self.constraints.filter_commit(self, edit, stats.token, scores=stats.prob)
        window.copy_(torch.where(edit, stats.token, window))
        self._wrote()
        self.order[:, offset : offset + edit.shape[1]].masked_fill_(edit, self.forwards)
        if self.logprobs is not None:
            self.logprobs.committed(edit, stats.token, offset, self.lead)
        edited = edit.any(-1)
        self.edits += edit.sum(-1)
        post = decided.all(-1) & self.runner.active  # rows whose masks were all decided before
        self.post_steps += post.long()
        self.post_open &= ~(post & ~edited)

    def answer_statistics(self, stats: TokenStats) -> AnswerStats:
        """(B, G) statistics of every answer position, this step's ``stats`` in the window;
        for stoppers that set ``needs_answer_stats`` (see dllm/samplers/stoppers/span.py)."""
        if self.answer_view is None:
            raise RuntimeError(f"stopper {self.config.stopper!r} reads answer statistics; "
                               "give its class needs_answer_stats = True")
        return self.answer_view.update(self, stats)

    def commit_answer(self, mask: Tensor, token: Tensor, scores: Tensor | None = None) -> None:
        """Write ``token`` where ``mask`` (B, G) is set over the whole answer (stoppers that
        commit outside the window, e.g. SchED's all-in fill), for active rows' masks only; a
        constrained row keeps only what keeps its canvas completable (most ``scores`` first)."""
        answer = self.tokens[:, self.canvas.prompt_width :]
        mask = mask & self.answer_masks() & self.runner.active[:, None]
        if self.constraints is not None:
            mask = self.constraints.filter_commit(self, mask, token, scores=scores, offset=self.canvas.prompt_width)
        answer.copy_(torch.where(mask, token, answer))
        self._wrote()
        self.order.masked_fill_(mask, self.forwards)

    def truncate(self, end: Tensor) -> None:
        """EoTP: end each row's answer before canvas position ``end`` (B,) (>= the row's
        current end: no change). Later positions become end-of-text and invisible keys, so the
        row decodes exactly as if its canvas were shorter; forwards stop at the furthest end
        over active rows (max with the window end) and blocks past every end cost nothing. A
        constrained row is not cut where no word would fit before ``end``."""
        end = torch.minimum(self.end, end)
        if self.constraints is not None:
            end = self.constraints.completable_ends(self, end)
        idx = torch.arange(self.canvas.length, device=end.device)
        after = idx[None, :] >= end[:, None]  # (B, L)
        after[:, : self.canvas.prompt_width] = False
        self.tokens.masked_fill_(after, self.fill_id)
        self._wrote()
        self.canvas.hide(after)
        self.order.masked_fill_(after[:, self.canvas.prompt_width :], -1)
        self.end = end
        self._truncated = self._ends_moved = True

    # --- bookkeeping ------------------------------------------------------------------------
    def begin_block(self, index: int) -> None:
        """Make decision window ``index`` (a block, or a sub-block) active."""
        P, size = self.canvas.prompt_width, self.config.window_length
        self.bs, self.be, self.step = P + index * size, P + (index + 1) * size, 0
        self.steps_before += self.row_step
        self.row_step.zero_()
        self._ends_moved = self._ends_moved or self._truncated  # the window end moved
        self.block_masks = self.eligible().sum(-1)
        if self.editing:
            self.post_steps.zero_()
            self.post_open.fill_(True)

    def moving_rows(self) -> Tensor:
        """(B,) active rows with masks left in the window (or, with token editing, edit forwards
        left): the rows a step moves."""
        moving = (self.eligible() & self.runner.active[:, None]).any(-1)
        if self.editing:  # edit forwards only in a window holding some of the row's answer
            moving |= (self.runner.active & self.post_open & (self.post_steps < self.config.max_post_steps)
                       & (self.bs < self.end))
        return moving

    def block_done(self) -> bool:
        return not bool(self.moving_rows().any())

    def advance(self, steps: Tensor) -> None:
        """Count one round: each row took ``steps`` (B,) base-rule steps."""
        self.row_step += steps  # bool (one step per moving row) or long: no cast of its own
        self.step += 1

    def place_leads(self, tails: list[list[int]]) -> None:
        """Write each row's prompt tail at the start of its answer region (block alignment, see
        dllm/engine/block_alignment.py): decided tokens that are not answer, never eligible, never an
        end of text."""
        P, device = self.canvas.prompt_width, self.tokens.device
        self.lead_mask = torch.zeros_like(self.order, dtype=torch.bool)
        for row, tail in enumerate(tails):
            if tail:
                self.tokens[row, P : P + len(tail)] = torch.tensor(tail, device=device)
                self.lead_mask[row, : len(tail)] = True
        self._wrote()
        self.lead = self.lead_mask.sum(-1)

    def text_final(self, tokens: Tensor | None = None) -> Tensor:
        """(N,) whether each canvas in ``tokens`` (default: the canvas) has final text: an
        end-of-text with no mask before it. Always False without ``stop_at_eos``."""
        if not self.config.stop_at_eos:
            answer = (self.tokens if tokens is None else tokens)[:, self.canvas.prompt_width :]
            return torch.zeros(answer.shape[0], dtype=torch.bool, device=answer.device)
        return self._final_text(tokens)[0]

    def _final_text(self, tokens: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``text_final`` (N,) under ``stop_at_eos``, and the answer masks (N, G) it was read from."""
        answer = (self.tokens if tokens is None else tokens)[:, self.canvas.prompt_width :]
        is_eos = torch.isin(answer, self.eos)
        if self.lead_mask is not None:  # a prompt tail's end-of-text ends nothing
            lead = self.lead_mask  # candidate states come row-major: K per canvas row
            is_eos &= ~lead.repeat_interleave(answer.shape[0] // lead.shape[0], 0)
        masked = self.answer_masks(tokens)
        # final: the first position holding a mask or an end-of-text holds an end-of-text (a row
        # with neither has argmax 0, no end-of-text there: not final)
        first = (is_eos | masked).view(torch.uint8).argmax(-1, keepdim=True)  # (N, 1); the view: no cast
        return is_eos.gather(-1, first).squeeze(-1), masked

    def finish_rows(self) -> None:
        """Rows whose text is final (no mask before the first end-of-text) stop here."""
        if not self.config.stop_at_eos:
            return
        done, masked = self._final_text()
        if self.editing:  # a window still editing may rewrite text before the end-of-text
            done &= ~self.moving_rows()
        answer = self.tokens[:, self.canvas.prompt_width :]
        answer.masked_fill_(done[:, None] & masked, self.fill_id)
        self._wrote()
        self.runner.active.masked_fill_(done, False)


def _filter_logits(logits: Tensor, top_k: int | None, top_p: float | None) -> Tensor:
    """Top-k / nucleus filtering (only when asked: it materialises sorted logits)."""
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True, stable=True)
        probs = sorted_logits.softmax(-1)
        drop_sorted = probs.cumsum(-1) - probs > top_p  # keep the token that crosses p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def check_seeds(seeds: list[int] | None, batch_size: int) -> None:
    """Per-row seeds: one int per prompt."""
    if seeds is None:
        return
    if len(seeds) != batch_size:
        raise ValueError(f"got {len(seeds)} seeds for {batch_size} prompts; give one seed per prompt "
                         "(or none: config.seed for every row)")
    for i, seed in enumerate(seeds):
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise ValueError(f"seed {i} is {seed!r}; seeds must be ints in [0, 2**63), like config.seed")


def check_prompts(prompts: list[list[int]], config: GenerationConfig, max_length: int,
                  max_tokens: int | None = None, field: str = "max_tokens") -> None:
    """Reject bad input before any model work. ``max_tokens``: the answer length the caller
    asked for as ``field`` (``config.gen_length`` is it rounded up to whole blocks); a prompt
    past the context then names that option, and the largest value of it that fits."""
    if not prompts:
        raise ValueError("no prompts given")
    for i, prompt in enumerate(prompts):
        if len(prompt) == 0:
            raise ValueError(f"prompt {i} is empty; every row needs at least one token")
        total = len(prompt) + config.gen_length
        if total <= max_length:
            continue
        if max_tokens is None:
            raise ValueError(f"prompt {i} has {len(prompt)} tokens + gen_length {config.gen_length} = {total} > "
                             f"the model's context of {max_length}; shorten the prompt or lower gen_length")
        block = 1 if config.block_length == max_tokens else config.block_length  # one block of the answer's length
        rounded = "" if config.gen_length == max_tokens else (
            f" (rounded up to {config.gen_length}, whole blocks of {block})")
        fits = (max_length - len(prompt)) // block * block
        lower = f" or lower {field} to {fits}" if fits > 0 else ""
        raise ValueError(f"prompt {i} has {len(prompt)} tokens + {field} {max_tokens}{rounded} = {total} > the "
                         f"model's context of {max_length}; shorten the prompt{lower}")


@dataclass(kw_only=True, slots=True)
class RowStart:
    """How one row enters a ``Decoding``: fresh (a prompt, offset 0), or resumed at a block
    boundary with its finished blocks appended to its prompt, so that it decodes exactly as its
    single run would from there (the serving scheduler rebuilds batches this way)."""

    prefix: list[int]  # prompt ids, then the row's finished answer blocks
    gen_length: int  # answer positions left to decode (whole blocks)
    seed: int = 0
    answer_offset: int = 0  # answer positions already in ``prefix`` (its random stream's positions)
    steps_before: int = 0  # base-rule steps the row took before (its random stream's clock)
    constraint: RowConstraint | None = None  # structured output: the language of the whole answer


def check_rows(rows: list[RowStart], config: GenerationConfig, max_length: int) -> None:
    """Resumed rows: whole blocks left, and each row's own length inside the model's context."""
    if not rows:
        raise ValueError("no rows given")
    for i, row in enumerate(rows):
        if not row.prefix:
            raise ValueError(f"row {i} has an empty prompt; every row needs at least one token")
        if row.gen_length <= 0 or row.gen_length % config.block_length:
            raise ValueError(f"row {i}: gen_length {row.gen_length} is not a positive multiple of "
                             f"block_length {config.block_length}")
        if len(row.prefix) + row.gen_length > max_length:
            raise ValueError(f"row {i} has {len(row.prefix)} tokens + gen_length {row.gen_length} > "
                             f"the model's context of {max_length}; shorten the prompt or lower gen_length")


class Decoding:
    """A batched decode that runs one strategy round per ``step()`` (one forward, or one batched
    forward of candidate states), until ``done``; ``result()`` then gives the DecodeResult.

    Rows may have their own ``gen_length`` (a shorter row is truncated: it decodes exactly as
    on its own canvas) and may resume at a block boundary (``RowStart``). Host syncs per round
    are those of the plain loop: one to know whether any row still moves in the window."""

    @torch.inference_mode()
    def __init__(self, model, rows: list[RowStart], config: GenerationConfig) -> None:
        config = uniform_state_config(model, model_block_windows(model, config))
        check_rows(rows, config, model.config.max_sequence_length)
        check_seeds([r.seed for r in rows], len(rows))
        original = rows
        aligned = align_rows(rows, alignment_unit(model, config), config.block_length)
        rows = aligned.rows
        longest = max(r.gen_length for r in rows)
        if longest != config.gen_length:  # same blocks and step budget per window, more windows
            config = dataclasses.replace(config, gen_length=longest,
                                         steps=config.steps_per_block * (longest // config.window_length))
        block_length = config.block_length
        if config.block_add_threshold is not None:  # pipelined: one window, the blocks move inside it
            config = dataclasses.replace(config, block_length=config.gen_length)
        self.model, self.config = model, config
        self.strategy = make_strategy(config.strategy, config.strategy_args)
        for check, arg in (("check_config", config), ("check_model", model)):  # refused here, not at step 1
            if hasattr(self.strategy, check):  # (stream would return and raise at its first update)
                getattr(self.strategy, check)(arg)
        # aligned rows may have no prompt left: the window's first position reads output P - 1
        # (logit shift), so the canvas keeps one column there
        width = max(1, max(len(r.prefix) for r in rows))
        if config.cuda_graphs:  # a captured canvas length: varied prompts share K/V slots and graphs
            width = graphs.canvas_length(width + longest, model.config.max_sequence_length) - longest
        canvas_length = width + longest
        self.plan = plan_memory(model, len(rows), canvas_length, config, self.strategy)
        check_memory_budget(self.plan, config, len(rows), canvas_length)
        canvas = build_canvas([r.prefix for r in rows], gen_length=longest, mask_id=model.mask_token_id,
                              pad_id=model.config.pad_token_id, device=model.device, min_width=width)
        state = self.state = DecodeState(model, canvas, config, [r.seed for r in rows])
        device = canvas.tokens.device
        if any(r.answer_offset or r.steps_before for r in rows):
            state.answer_offset = torch.tensor([r.answer_offset for r in rows], device=device)
            state.steps_before = torch.tensor([r.steps_before for r in rows], device=device)
        if any(r.gen_length < longest for r in rows):
            state.truncate(torch.tensor([canvas.prompt_width + r.gen_length for r in rows], device=device))
        if any(r.constraint is not None for r in rows):
            check_supported(config)
            state.constraints = CanvasConstraints(
                [_resumed_constraint(r) for r in original], model.mask_token_id, model.eos_token_ids)
        if config.block_add_threshold is not None:
            from dllm.engine.pipeline import Pipelined

            self.strategy = Pipelined(self.strategy, state, block_length)
        self.answer_width = max(aligned.wanted)  # the longest row's answer (its lead not counted)
        self.wanted = None  # (B, 1) each row's answer length; None: no row has a lead
        if any(aligned.leads):
            state.place_leads([tail_tokens(r, n) for r, n in zip(original, aligned.leads)])
            self.wanted = torch.tensor(aligned.wanted, device=device)[:, None]
        if state.constraints is not None:  # a canvas that holds no word is refused before any forward
            state.constraints.check_start(state)
        self.max_steps = config.steps_per_block + 4 * config.window_length + config.max_post_steps
        self.window = -1  # the active decision window
        self.done = False
        # after each round, the rows (B,) bool whose text can no longer change (``run``'s ``decided``)
        self.decided: Callable[["Decoding"], Tensor] | None = None
        _sync(model)
        self.start = time.perf_counter()
        self._stamps = [0.0]  # seconds at the end of the round of each forward (index = forward)
        self._next_window()

    @property
    def block(self) -> int:
        """Index of the active block (windows are sub-blocks when sub_block_length is set)."""
        return self.window * self.config.window_length // self.config.block_length

    def answer(self) -> Tensor:
        """(B, G) answer tokens of the canvas, the mask id where not yet committed; each row from
        its own answer start (after a lead), cut at its requested length (end-of-text after it)."""
        return self._from_answer_start(self.state.tokens[:, self.state.canvas.prompt_width :], self.state.fill_id)

    def window_start(self, row: int) -> int:
        """The active window's first position in ``row``'s answer (as ``answer()`` numbers it):
        under token editing what lies before it is final, what lies after may still change."""
        state = self.state
        lead = int(state.lead[row]) if state.lead is not None else 0
        return max(state.bs - state.canvas.prompt_width - lead, 0)

    def _from_answer_start(self, region: Tensor, fill: int) -> Tensor:
        """(B, G) values of the answer region (B, G') read from each row's answer start, cut at
        ``answer_width`` and filled with ``fill`` past each row's own length."""
        if self.wanted is None:
            return region
        idx = torch.arange(self.answer_width, device=region.device)[None, :]
        taken = region.gather(1, (idx + self.state.lead[:, None]).clamp_max(region.shape[1] - 1))
        return torch.where(idx < self.wanted, taken, torch.full_like(taken, fill))

    @torch.inference_mode()
    def step(self) -> None:
        """One round of the strategy on the rows that still move in the active window."""
        if self.done:
            raise RuntimeError("the decoding is done; read result()")
        state = self.state
        if state.step >= self.max_steps:  # a row still moving after max_steps rounds is stuck
            stuck = self._moving.nonzero().flatten().tolist()
            raise RuntimeError(f"rule {self.config.policy!r} made no progress in block {self.window} (rows {stuck})")
        steps = self.strategy.step(state)  # base-rule steps per row; None: one per moving row
        state.advance(self._moving if steps is None else steps)
        state.finish_rows()
        if self.decided is not None:  # stopped before the round's one read of the moving rows
            state.runner.active &= ~self.decided(self)
        now = time.perf_counter() - self.start
        self._stamps.extend([now] * (state.forwards + 1 - len(self._stamps)))
        self._moving = state.moving_rows()
        if not bool(self._moving.any()):
            self._next_window()

    @torch.inference_mode()
    def stop_rows(self, rows: Tensor) -> None:
        """Stop ``rows`` (B,) bool now (cancelled requests): no more commits, forwards or charges."""
        self.state.runner.active &= ~rows
        self._moving = self.state.moving_rows()
        if not self.done and not bool(self._moving.any()):
            self._next_window()

    def record_logprobs(self, top: int) -> None:
        """Record each committed token's logprob and its ``top`` alternatives (``engine.logprobs``;
        the config is the caller's to check with ``check_logprobs``)."""
        state = self.state
        state.logprobs = CommitLogprobs(*state.order.shape, top=top, device=state.order.device)

    def run(self, decided: Callable[["Decoding"], Tensor] | None = None) -> DecodeResult:
        """Step to the end. ``decided``: called after each round's commits, the rows (B,) bool whose
        text can no longer change (a request's max_tokens or stop reached, ``api.decided``),
        stopped in that round as the server and ``stream`` stop them, so every row costs the
        forwards of its own text (a device tensor: no host read of its own)."""
        self.decided = decided
        while not self.done:
            self.step()
        return self.result()

    @torch.inference_mode()
    def result(self) -> DecodeResult:
        state = self.state
        last = state.order.max(-1).values.clamp_min(0).tolist()  # each row's last committing forward
        order = self._from_answer_start(state.order, -1)
        return DecodeResult(answer=self.answer().clone(), order=order, nfe=state.runner.nfe,
                            token_forwards=state.runner.token_forwards, draft_rows=state.runner.draft_rows,
                            wall_time=self.wall_time, row_seconds=[self._stamps[f] for f in last],
                            memory={**self.plan.as_dict(), "kv_cache_peak_bytes": state.cache.peak_bytes},
                            edits=state.edits if state.editing else None, logprobs=state.logprobs)

    def _next_window(self) -> None:
        """Begin the next window with a moving row; ``done`` when none is left."""
        state = self.state
        while True:
            if self.window >= 0 and not bool(state.runner.active.any()):
                break
            self.window += 1
            if self.window >= self.config.num_windows:
                break
            state.begin_block(self.window)
            self._moving = state.moving_rows()
            if bool(self._moving.any()):
                return
        self.done = True
        _sync(self.model)
        self.wall_time = time.perf_counter() - self.start


@torch.inference_mode()
def decode(model, prompts: list[list[int]], config: GenerationConfig,
           seeds: list[int] | None = None,
           constraints: list[RowConstraint | None] | None = None,
           decided: Callable[[Decoding], Tensor] | None = None, logprobs: int | None = None) -> DecodeResult:
    """Decode a batch of token-id prompts (ragged lengths allowed) with ``config``.

    ``seeds``: one seed per prompt (default ``config.seed`` for every row). A row's random
    numbers depend only on its seed, so it decodes alike in any batch, at any position.
    ``constraints``: one per prompt (None: free), the language each answer must be a word of.
    ``decided``: rows to stop after a round (``Decoding.run``). ``logprobs``: record committed
    tokens' logprobs with this many alternatives (``DecodeResult.logprobs``)."""
    check_prompts(prompts, config, model.config.max_sequence_length)
    check_seeds(seeds, len(prompts))
    if logprobs is not None:
        check_logprobs(logprobs, config)
    seeds = [config.seed] * len(prompts) if seeds is None else seeds
    if constraints is not None and len(constraints) != len(prompts):
        raise ValueError(f"got {len(constraints)} constraints for {len(prompts)} prompts; give one per prompt (None: free)")
    constraints = constraints or [None] * len(prompts)
    rows = [RowStart(prefix=list(p), gen_length=config.gen_length, seed=s, constraint=c)
            for p, s, c in zip(prompts, seeds, constraints)]
    decoding = Decoding(model, rows, config)
    if logprobs is not None:
        decoding.record_logprobs(logprobs)
    return decoding.run(decided)


def _resumed_constraint(row: RowStart) -> RowConstraint | None:
    """A row's constraint from where its answer stands: after the answer tokens its prefix
    already holds (a row resumed at a block boundary)."""
    if row.constraint is None or not row.answer_offset:
        return row.constraint
    return row.constraint.after(row.prefix[len(row.prefix) - row.answer_offset :])


def _sync(model) -> None:
    if model.device.type == "cuda":
        torch.cuda.synchronize(model.device)
