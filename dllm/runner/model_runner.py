"""ModelRunner: the one place the engine calls the model, and where forwards are counted.

It describes what each query may attend to (key padding, plus the block-causal rule for
block-diffusion models) without a dense mask, applies classifier-free guidance, applies the
family's logit shift, and counts NFE and token-forwards per row.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from dllm.runner.canvas import Canvas
from dllm.runner.compiled import call_compiled, mark_static
from dllm.runner.graphs import GraphRunner, canvas_length, graph_runner
from dllm.models.transformer import DiffusionTransformer
from dllm.models.visibility import KeyVisibility, block_causal_spans


class LastForward(NamedTuple):
    """Raw logits (B, T, V) of the latest canvas forward from its first answer output on, the
    canvas position of their first query, and the rows (B,) it was charged to. Read by stoppers
    that need the whole answer span."""

    logits: Tensor
    q_start: int
    charged: Tensor


def head_rows_pay_off(device: torch.device) -> bool:
    """Whether the LM head should run on the read window positions only. On a CPU the head's
    FLOPs are its time (~a fifth of a small model's window forward), so skipping committed
    positions pays; on a GPU a window's head reads the same weights either way, and selecting
    rows would make the host wait for the device."""
    return device.type == "cpu"


class ModelRunner:
    def __init__(self, model, canvas: Canvas, *, cfg_scale: float = 0.0, compile: bool = False,
                 cuda_graphs: bool = False) -> None:
        self.model = model
        self.canvas = canvas
        self.cfg_scale = cfg_scale
        self.compile = compile  # forwards through torch.compile (GenerationConfig.compile)
        # forwards replayed from CUDA graphs (GenerationConfig.cuda_graphs; dllm/runner/graphs.py)
        if cuda_graphs and (getattr(model, "tensor_parallel", None) or getattr(model, "tensor_shard", None)):
            raise ValueError("cuda_graphs=True under tensor parallelism is not captured yet (its collectives are "
                             "untested inside a graph); decode with cuda_graphs=False")
        self.graphs: GraphRunner | None = graph_runner(model) if cuda_graphs else None
        B = canvas.batch_size
        self.nfe = torch.zeros(B, dtype=torch.long, device=canvas.tokens.device)
        self.token_forwards = torch.zeros_like(self.nfe)
        self.draft_rows = torch.zeros_like(self.nfe)
        self.active = torch.ones(B, dtype=torch.bool, device=canvas.tokens.device)
        self.live_end = canvas.length  # forwards never need positions past this (EoTP)
        self.keep_last = False  # keep the last canvas forward's logits (answer-wide stoppers)
        self.last: LastForward | None = None
        # (N, W) bool, set by the engine around one block_logits call: the window positions whose
        # logits the step reads (rule and stopper read eligible positions only); None = all
        self.head_rows: Tensor | None = None

    @property
    def shift_logits(self) -> bool:
        return self.model.shift_logits

    def visibility(self, q_start: int, q_len: int, key_len: int, rows: Tensor | None = None) -> KeyVisibility:
        """Keys that are real tokens ((N, key_len) validity, None when the canvas has no padding
        or truncated end) and, for block-causal models, the query spans over key prefixes
        (keys in the query's block or an earlier one; blocks counted from the prompt width)."""
        valid = None
        if self.canvas.padded:
            valid = self.canvas.valid[:, :key_len] if rows is None else self.canvas.valid[rows, :key_len]
        spans = None
        if self.model.attention == "block_causal":
            spans = block_causal_spans(q_start, q_len, key_len, prompt_width=self.canvas.prompt_width,
                                       block_size=self.model.config.block_size,
                                       prompt_block=self.model.config.block_origin == "prompt")
        return KeyVisibility(valid=valid, spans=spans)

    def model_blocks(self, start: int, end: int) -> tuple[int, int]:
        """Block-causal models: canvas span [start, end) widened to whole model blocks of
        ``bd_size`` (counted from the answer start, as the attention mask counts them) and
        clipped to ``live_end``. A query sees every key of its model block, so a forward that
        leaves part of one out would attend to K/V never written (or stale), and no query sees
        a later block, so nothing past the span's last block is needed. Other models: unchanged."""
        if self.model.attention != "block_causal":
            return start, end
        P, size = self.canvas.prompt_width, self.model.config.block_size
        first = P + (start - P) // size * size
        if start < P and self.model.config.block_origin == "prompt":  # the prompt is one block
            first = 0
        last = P - (P - end) // size * size
        return max(first, 0), min(last, self.live_end)

    def forward(self, tokens: Tensor, q_start: int, *, cache=None, rows: Tensor | None = None,
                count: Tensor | None = None, logits_for: tuple[int, int] | None = None) -> Tensor:
        """Raw logits for the window tokens (N, T) at canvas offset ``q_start``: (N, T, V), or
        (N, hi - lo, V) for the queries ``logits_for=(lo, hi)`` only (the LM head runs on those).

        rows: canvas row of each of the N inputs (candidate states of FreeDave / LoPA share a
        row); count: which canvas rows this forward is charged to (default: active rows).
        Answer-wide stoppers (``keep_last``) widen a canvas forward's head to every answer output.
        """
        asked = tokens.shape[1]
        if self.graphs is not None and cache is None and self.model.attention == "block_causal":
            tokens = self._widened(tokens)
        T = tokens.shape[1]
        lo, hi = (0, asked) if logits_for is None else logits_for
        keep = self.keep_last and rows is None
        head_lo, head_hi = lo, hi
        if keep:  # every answer output of the forward
            head_lo, head_hi = min(lo, max(0, self.canvas.prompt_width - int(self.shift_logits) - q_start)), T
        head = None if (head_lo, head_hi) == (0, T) else (head_lo, head_hi)
        need = self.head_rows
        # compiled or captured forwards keep fixed shapes: the rows' selection is a data-dependent
        # shape (a graph break under torch.compile; a CUDA graph cannot replay it)
        static = self.compile or self.graphs is not None
        if need is not None and (rows is not None or keep or static or self.cfg_scale > 0
                                 or need.shape != (tokens.shape[0], hi - lo) or not head_rows_pay_off(tokens.device)
                                 or not isinstance(self.model, DiffusionTransformer)):
            need = None  # candidate states, answer-wide heads, static compiled / graph shapes, wrapped models
        key_len = self.canvas.length if cache is not None else T
        if cache is None and q_start != 0:
            raise ValueError("an uncached forward must cover the canvas from position 0")
        positions = self.canvas.positions[:, q_start : q_start + T]
        if rows is not None:
            positions = positions[rows]
        visible = self.visibility(q_start, T, key_len, rows)
        if self.cfg_scale > 0:
            logits = self._guided(tokens, positions, visible, cache, head)
        else:
            logits = self._model(tokens, positions, visible, cache, q_start, head, need)
        charged = self._count(T, tokens.shape[0], rows, count)
        if self.keep_last:  # candidate-state forwards (rows) do not describe the canvas
            seen = logits[:, : asked - head_lo]  # a widened forward's extra queries are not the canvas's
            self.last = None if rows is not None else LastForward(seen, q_start + head_lo, charged)
        return logits[:, lo - head_lo : hi - head_lo] if (head_lo, head_hi) != (lo, hi) else logits

    def _widened(self, tokens: Tensor) -> Tensor:
        """An uncached block-causal forward (the canvas up to the window's model block) widened
        to a captured length (``graphs.canvas_length``) with mask tokens: no query sees a later
        block, so the asked positions' logits are unchanged, and the graphs of a decode are one
        per 64 positions, not one per model block. The extra queries are computed and counted."""
        N, T = tokens.shape
        width = canvas_length(T, self.canvas.length)
        if width == T:
            return tokens
        return torch.cat([tokens, tokens.new_full((N, width - T), self.model.mask_token_id)], dim=1)

    def new_prefix(self):
        """An empty prefix store of an encoder-denoiser model (``cache="encoder"``)."""
        return self.model.new_prefix()

    def encode(self, tokens: Tensor, q_start: int, store) -> None:
        """Encoder-denoiser models: run canvas tokens (B, T) from ``q_start`` through the encoder,
        appending their K/V to ``store``. Not an NFE: its tokens count as token-forwards."""
        span = slice(q_start, q_start + tokens.shape[1])
        if self.graphs is not None:  # once per canvas, appending to the store: eager, counted
            self.graphs.stats.eager += 1
        self.model.encode(tokens, self.canvas.positions[:, span], self.canvas.valid[:, span], store)
        self.token_forwards += self.active.long() * tokens.shape[1]

    def denoise(self, tokens: Tensor, q_start: int, store, self_conditioning: Tensor | None,
                count: Tensor | None = None) -> Tensor:
        """Encoder-denoiser models: logits (B, T, V) of the window tokens (B, T) at canvas offset
        ``q_start`` over the encoded prefix; one forward, charged like ``forward``'s."""
        positions = self.canvas.positions[:, q_start : q_start + tokens.shape[1]]
        if self.graphs is not None:
            logits = self.graphs.run_denoise(self.model, tokens, positions, store, self_conditioning,
                                             capacity=self.canvas.length)
        else:
            logits = self.model.denoise(tokens, positions, store, self_conditioning)
        self._count(tokens.shape[1], tokens.shape[0], None, count)
        return logits

    def charge(self, token_counts: Tensor, rows: Tensor | None = None, count: Tensor | None = None) -> Tensor:
        """Count one forward that a cache ran layer by layer itself: ``token_counts`` (N,) are
        the query tokens each input really had computed (``rows``: as in forward). Returns the
        rows charged."""
        return self._count(token_counts, token_counts.shape[0], rows, count)

    def _guided(self, tokens, positions, visible: KeyVisibility, cache, head) -> Tensor:
        if cache is not None:
            raise ValueError("cfg_scale > 0 is supported with cache='none' only; drop one of them")
        prompt = torch.zeros_like(tokens, dtype=torch.bool)
        prompt[:, : self.canvas.prompt_width] = True
        uncond = tokens.masked_fill(prompt, self.model.mask_token_id)
        valid = None if visible.valid is None else visible.valid.repeat(2, 1)
        both = self._model(torch.cat([tokens, uncond]), positions.repeat(2, 1), KeyVisibility(valid, visible.spans),
                           None, 0, head)
        cond, unc = both.chunk(2)
        return unc + (self.cfg_scale + 1) * (cond - unc)

    def _model(self, tokens, positions, visible, cache, write_at, head, need=None) -> Tensor:
        if self.graphs is not None:
            slot = getattr(cache, "slot", None)
            if need is None and (cache is None or slot is not None):
                return self.graphs.run(self.model, tokens, positions, visible, slot, write_at, head)
            self.graphs.stats.eager += 1  # buffers of its own (candidate states): not replayable
        read = {} if need is None else {"head_rows": need}  # wrapped models take no head_rows
        if not self.compile:
            return self.model(tokens, positions, visible, cache, write_at, head, **read)
        if cache is not None:
            mark_static(cache)
        return call_compiled(self.model, tokens, positions, visible, cache, write_at, head, **read)

    def _count(self, T: int | Tensor, N: int, rows: Tensor | None, count: Tensor | None) -> Tensor:
        charged = self.active if count is None else count & self.active
        self.nfe += charged  # bool into long counts: no cast of their own
        if rows is None:  # one input per canvas row: the common round, three in-place adds
            self.draft_rows += charged
            if isinstance(T, Tensor):
                self.token_forwards += charged * T
            else:
                self.token_forwards.add_(charged, alpha=T)
            return charged
        # inputs per canvas row (bincount would read the device)
        width = torch.zeros_like(self.nfe).index_add_(0, rows, torch.ones_like(rows))
        self.draft_rows += charged.long() * width
        if isinstance(T, Tensor):  # tokens per input, summed into their rows
            self.token_forwards += charged.long() * torch.zeros_like(self.nfe).index_add_(0, rows, T.long())
        else:
            self.token_forwards += charged.long() * width * T
        return charged
