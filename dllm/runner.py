"""ModelRunner: the one place the engine calls the model, and where forwards are counted.

It builds the attention mask (key padding, plus the block-causal rule for block-diffusion
models), applies classifier-free guidance, applies the family's logit shift, and counts NFE and
token-forwards per row.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from dllm.canvas import Canvas


class LastForward(NamedTuple):
    """Raw logits (B, T, V) of the latest canvas forward, its first query position, and the
    rows (B,) it was charged to. Read by stoppers that need the whole answer span."""

    logits: Tensor
    q_start: int
    charged: Tensor


class ModelRunner:
    def __init__(self, model, canvas: Canvas, *, cfg_scale: float = 0.0) -> None:
        self.model = model
        self.canvas = canvas
        self.cfg_scale = cfg_scale
        B = canvas.batch_size
        self.nfe = torch.zeros(B, dtype=torch.long, device=canvas.tokens.device)
        self.token_forwards = torch.zeros_like(self.nfe)
        self.draft_rows = torch.zeros_like(self.nfe)
        self.active = torch.ones(B, dtype=torch.bool, device=canvas.tokens.device)
        self.live_end = canvas.length  # forwards never need positions past this (EoTP)
        self.keep_last = False  # keep the last canvas forward's logits (answer-wide stoppers)
        self.last: LastForward | None = None

    @property
    def shift_logits(self) -> bool:
        return self.model.shift_logits

    def attn_mask(self, q_start: int, q_len: int, key_len: int, rows: Tensor | None = None) -> Tensor:
        """(B, 1, q_len, key_len) bool: keys that are real tokens (and, for block-causal
        models, in the query's block or an earlier one)."""
        valid = self.canvas.valid[:, :key_len] if rows is None else self.canvas.valid[rows, :key_len]
        mask = valid[:, None, None, :].expand(-1, 1, q_len, key_len)
        if self.model.attention == "block_causal":
            size = self.model.config.block_size
            P = self.canvas.prompt_width
            q_block = (torch.arange(q_start, q_start + q_len, device=valid.device) - P) // size
            k_block = (torch.arange(key_len, device=valid.device) - P) // size
            mask = mask & (k_block[None, :] <= q_block[:, None])[None, None]
        return mask

    def forward(self, tokens: Tensor, q_start: int, *, cache=None, rows: Tensor | None = None,
                count: Tensor | None = None) -> Tensor:
        """Raw logits (N, T, V) for the window tokens (N, T) at canvas offset ``q_start``.

        rows: canvas row of each of the N inputs (candidate states of FreeDave / LoPA share a
        row); count: which canvas rows this forward is charged to (default: active rows).
        """
        T = tokens.shape[1]
        key_len = self.canvas.length if cache is not None else T
        if cache is None and q_start != 0:
            raise ValueError("an uncached forward must cover the canvas from position 0")
        positions = self.canvas.positions[:, q_start : q_start + T]
        if rows is not None:
            positions = positions[rows]
        mask = self.attn_mask(q_start, T, key_len, rows)
        if self.cfg_scale > 0:
            logits = self._guided(tokens, positions, mask, q_start, cache, rows)
        else:
            logits = self.model(tokens, positions, mask, cache, q_start)
        charged = self._count(T, tokens.shape[0], rows, count)
        if self.keep_last:  # candidate-state forwards (rows) do not describe the canvas
            self.last = None if rows is not None else LastForward(logits, q_start, charged)
        return logits

    def _guided(self, tokens, positions, mask, q_start, cache, rows) -> Tensor:
        if cache is not None:
            raise ValueError("cfg_scale > 0 is supported with cache='none' only; drop one of them")
        prompt = torch.zeros_like(tokens, dtype=torch.bool)
        prompt[:, : self.canvas.prompt_width] = True
        uncond = tokens.masked_fill(prompt, self.model.mask_token_id)
        both = self.model(torch.cat([tokens, uncond]), positions.repeat(2, 1), mask.repeat(2, 1, 1, 1))
        cond, unc = both.chunk(2)
        return unc + (self.cfg_scale + 1) * (cond - unc)

    def _count(self, T: int, N: int, rows: Tensor | None, count: Tensor | None) -> Tensor:
        charged = self.active if count is None else count & self.active
        self.nfe += charged.long()
        width = torch.ones_like(self.nfe) if rows is None else torch.bincount(rows, minlength=self.nfe.shape[0])
        self.draft_rows += charged.long() * width
        self.token_forwards += charged.long() * width * T
        return charged
