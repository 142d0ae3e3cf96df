"""Block-level KV caches (Fast-dLLM prefix / dual) with optional sub-block refresh (v2).

At a block start one refresh forward over the canvas fills every layer's buffer; its logits
serve that step. Later steps forward only a window against the cached K/V:
  prefix: the window is [bs, L): only the K/V before the block is reused;
  dual:   the window is [bs, be): prefix and suffix K/V are both reused.
``refresh_every=N`` refreshes every N steps as well (N = 1 reproduces the uncached decode).
With ``sub_block_length`` the engine decodes sub-block by sub-block; at each sub-block start the
whole block (plus the suffix in prefix mode) is recomputed, then only the sub-block.

Dream's logit shift: the window starts one position early (bs - 1), so the block's first logit
is the fresh output of the position before it.

Block-causal models (Fast-dLLM v2): earlier blocks never see later ones, so their K/V is exact
once written. The refresh forwards only [end of exact K/V, be): the just-finished block (its
final K/V, and its last output gives this block's first token) plus the active block, so the
block commit costs no forward of its own; later steps forward only the block (prefix and dual
coincide). Without sub-blocks the cached decode equals the uncached one.
"""
from __future__ import annotations

from torch import Tensor

from dllm.cache.base import register_cache
from dllm.cache.kv import KVBuffers
from dllm.runner import ModelRunner


class BlockCache:
    def __init__(self, mode: str, *, block_length: int, refresh_every: int | None = None,
                 sub_block_length: int | None = None) -> None:
        if refresh_every is not None and refresh_every <= 0:
            raise ValueError(f"refresh_every must be a positive number of steps, got {refresh_every}")
        self.mode, self.block_length = mode, block_length
        self.refresh_every, self.sub_block_length = refresh_every, sub_block_length
        self.kv: KVBuffers | None = None
        self.exact_end = 0  # block-causal: K/V of [0, exact_end) is final
        self.done: set[tuple] = set()  # (kind, window start, step) of refreshes already made
        self.peak_bytes = 0  # largest K/V footprint held at once (base buffers + candidate copy)

    def _outer_block(self, runner: ModelRunner, bs: int) -> tuple[int, int]:
        P = runner.canvas.prompt_width
        start = P + (bs - P) // self.block_length * self.block_length
        return start, start + self.block_length

    def block_logits(self, runner: ModelRunner, tokens: Tensor, bs: int, be: int, step: int,
                     rows: Tensor | None = None, count: Tensor | None = None) -> Tensor:
        if self.kv is None:
            self.kv = KVBuffers.allocate(runner.model, runner.canvas.batch_size, runner.canvas.length)
        shift = int(runner.shift_logits)
        W = be - bs
        outer_bs, outer_be = self._outer_block(runner, bs)
        # Each refresh happens once, on the canvas' own forward: candidate batches (FreeDave,
        # LoPA) evaluated at the same step reuse it.
        refresh = self._due(("block", outer_bs, 0), step == 0 and bs == outer_bs, rows)
        refresh |= self._due(("every", bs, step), bool(self.refresh_every) and step % (self.refresh_every or 1) == 0, rows)
        rebuild = self._due(("sub", bs, 0), step == 0 and bool(self.sub_block_length), rows)
        kv = self.kv if rows is None else self.kv.select(rows)
        self.peak_bytes = max(self.peak_bytes, self.kv.nbytes + (kv.nbytes if rows is not None else 0))
        if refresh:
            start = self.exact_end if runner.model.attention == "block_causal" else 0
            start = min(start, outer_bs - shift)
            end = outer_be if runner.model.attention == "block_causal" else runner.live_end
            logits = runner.forward(tokens[:, start:end], start, cache=kv, rows=rows, count=count)
            if runner.model.attention == "block_causal" and rows is None:
                self.exact_end = outer_bs
            first = bs - shift - start
            return logits[:, first : first + W]
        # block-causal: later blocks never reach this one, so prefix needs no suffix either
        narrow = self.mode == "dual" or runner.model.attention == "block_causal"
        if rebuild:  # a new sub-block: rebuild the block's K/V
            q_start = outer_bs - shift
            q_end = outer_be if narrow else runner.live_end
        else:
            q_start = bs - shift
            q_end = be if narrow else runner.live_end
        logits = runner.forward(tokens[:, q_start:q_end], q_start, cache=kv, rows=rows, count=count)
        first = bs - shift - q_start
        return logits[:, first : first + W]

    def _due(self, key: tuple, condition: bool, rows: Tensor | None) -> bool:
        if not condition or rows is not None or key in self.done:
            return False
        self.done.add(key)
        return True


@register_cache("prefix")
def prefix_cache(**options) -> BlockCache:
    return BlockCache("prefix", **options)


@register_cache("dual")
def dual_cache(**options) -> BlockCache:
    return BlockCache("dual", **options)
