"""Block-level KV caches (Fast-dLLM prefix / dual) with optional sub-block refresh (v2).

At a block start one refresh forward over the canvas fills every layer's buffer; its logits
serve that step. Later steps forward only a window against the cached K/V:
  prefix: the window is [bs, L): only the K/V before the block is reused;
  dual:   the window is [bs, be): prefix and suffix K/V are both reused.
``refresh_every=N`` refreshes every N steps as well (N = 1 reproduces the uncached decode).
``first_token="argmax"`` reproduces Fast-dLLM's own loops: the block's first position is
committed from the refresh forward alone (``samplers/rules/first_token.py``) and, for Dream,
the window then starts at bs, keeping the refresh's K/V of bs - 1; ``"rule"`` (the default)
lets the rule decide at the refresh like at any step.
With ``sub_block_length`` the engine decodes sub-block by sub-block; at each sub-block start the
whole block (plus the suffix in prefix mode) is recomputed, then only the sub-block.

Dream's logit shift: the window starts one position early (bs - 1), so the block's first logit
is the fresh output of the position before it.

Block-causal models (Fast-dLLM v2): earlier blocks never see later ones, so their K/V is exact
once written. The refresh forwards only [end of exact K/V, be): the just-finished block (its
final K/V, and its last output gives this block's first token) plus the active block, so the
block commit costs no forward of its own; later steps forward only the block (prefix and dual
coincide). Forwards cover whole model blocks (``bd_size``, which the attention mask uses) and
the exact end advances only over finished model blocks, so any ``block_length`` works (smaller
than, equal to or larger than ``bd_size``, aligned or not). Without sub-blocks the cached
decode equals the uncached one.
"""
from __future__ import annotations

import inspect

import torch
from torch import Tensor

from dllm.cache.base import ENGINE_OPTIONS, register_cache
from dllm.cache.kv import KVBuffers
from dllm.runner.model_runner import ModelRunner


FIRST_TOKEN = ("rule", "argmax")


class BlockCache:
    def __init__(self, mode: str, *, block_length: int, refresh_every: int | None = None,
                 sub_block_length: int | None = None, first_token: str = "rule") -> None:
        if refresh_every is not None and refresh_every <= 0:
            raise ValueError(f"refresh_every must be a positive number of steps, got {refresh_every}")
        if first_token not in FIRST_TOKEN:
            raise ValueError(f"first_token must be one of {FIRST_TOKEN}, got {first_token!r}")
        self.first_token = first_token
        self.mode, self.block_length = mode, block_length
        self.refresh_every, self.sub_block_length = refresh_every, sub_block_length
        self.kv: KVBuffers | None = None
        self.exact_end = 0  # block-causal: K/V of [0, exact_end) is final
        self.done: set[tuple] = set()  # (kind, window start, step) of refreshes already made
        self.peak_bytes = 0  # largest K/V footprint held at once (base buffers + candidate copy)
        # block-causal: prompt blocks shared across decodes (prompt_store.attach); None: off
        self.prompt_reuse = None

    def _outer_block(self, runner: ModelRunner, bs: int) -> tuple[int, int]:
        P = runner.canvas.prompt_width
        start = P + (bs - P) // self.block_length * self.block_length
        return start, start + self.block_length

    def block_logits(self, runner: ModelRunner, tokens: Tensor, bs: int, be: int, step: int,
                     rows: Tensor | None = None, count: Tensor | None = None) -> Tensor:
        if self.kv is None:
            self.kv = KVBuffers.allocate(runner.model, runner.canvas.batch_size, runner.canvas.length,
                                         graphs=runner.graphs)
            if self.prompt_reuse is not None:  # stored prompt blocks: the first refresh starts after them
                self.exact_end = self.prompt_reuse.load(runner.canvas, self.kv)
        shift = int(runner.shift_logits)
        W = be - bs
        outer_bs, outer_be = self._outer_block(runner, bs)
        block_causal = runner.model.attention == "block_causal"
        # Each refresh happens once, on the canvas' own forward: candidate batches (FreeDave,
        # LoPA) evaluated at the same step reuse it.
        refresh = self._due(("block", outer_bs, 0), step == 0 and bs == outer_bs, rows)
        refresh |= self._due(("every", bs, step), bool(self.refresh_every) and step % (self.refresh_every or 1) == 0, rows)
        rebuild = self._due(("sub", bs, 0), step == 0 and bool(self.sub_block_length), rows)
        kv = self.kv if rows is None else self.kv.select(rows, runner.graphs)
        self.peak_bytes = max(self.peak_bytes, self.kv.nbytes + (kv.nbytes if rows is not None else 0))
        if refresh:
            block_start, block_end = runner.model_blocks(outer_bs, outer_be)
            start = min(self.exact_end, outer_bs - shift) if block_causal else 0
            end = block_end if block_causal else runner.live_end
            first = bs - shift - start
            logits = runner.forward(tokens[:, start:end], start, cache=kv, rows=rows, count=count,
                                    logits_for=(first, first + W))
            if block_causal and rows is None:  # model blocks before the active one are final
                self.exact_end = block_start
                if self.prompt_reuse is not None:  # the prompt's K/V is final: store what was computed
                    self.prompt_reuse.save(self.kv)
                    self.prompt_reuse = None
            return logits
        # block-causal: later blocks never reach this one, so prefix needs no suffix either
        narrow = self.mode == "dual" or block_causal
        if rebuild:  # a new sub-block: rebuild the block's K/V
            q_start, q_end = runner.model_blocks(outer_bs, outer_be)
            q_start = min(q_start, outer_bs - shift)
        elif self.sub_block_length:  # the sub-block alone, against the block's K/V
            q_start, q_end = bs - shift, be
        else:  # the whole block (block-causal: with the rest of its model blocks)
            q_start, q_end = runner.model_blocks(bs, be)
            # first_token="argmax": the first position is committed at the refresh, so the
            # window starts at bs and keeps the refresh's K/V of bs - 1 (Fast-dLLM's Dream loop)
            q_start = min(q_start, bs - shift * (self.first_token == "rule" or bs != outer_bs))
        q_end = q_end if narrow else runner.live_end
        first = bs - shift - q_start
        logits = runner.forward(tokens[:, q_start:q_end], q_start, cache=kv, rows=rows, count=count,
                                logits_for=(max(first, 0), first + W))
        if first < 0:  # no output before bs: its (committed) position reads its own, as Fast-dLLM
            return torch.cat([logits[:, :1], logits], dim=1)
        return logits

    def _due(self, key: tuple, condition: bool, rows: Tensor | None) -> bool:
        if not condition or rows is not None or key in self.done:
            return False
        self.done.add(key)
        return True


# BlockCache's options beside its mode and what the engine passes
BLOCK_CACHE_ARGS = tuple(name for name in inspect.signature(BlockCache).parameters if name not in ("mode", *ENGINE_OPTIONS))


@register_cache("prefix", cache_args=BLOCK_CACHE_ARGS)
def prefix_cache(**options) -> BlockCache:
    return BlockCache("prefix", **options)


@register_cache("dual", cache_args=BLOCK_CACHE_ARGS)
def dual_cache(**options) -> BlockCache:
    return BlockCache("dual", **options)
