"""Prompt K/V shared across decodes for block-causal models: whole prompt blocks computed for an
earlier request (a shared system prompt, a few-shot preamble) are reused, exactly.

Under block-causal attention a query sees its own model block and earlier ones, so the K/V of a
prompt block [a, b) at every layer is a function of the tokens [0, b), their positions and the
block boundaries below b, nothing else. The boundaries are fixed by b and the model's block size
whatever the origin: blocks counted from position 0 (``block_origin == "absolute"``; the engine
prompt is whole units, block_alignment.py) end at multiples of the size, and blocks counted back
from the answer start (``"answer"``) end at ``b - k * size`` down to a first, shorter block. So a
block is keyed by (the model's block size, the tokens [0, b)), hashed as a chain block by block:
two prompts that share a preamble share its blocks only where their partitions coincide (with
answer-origin blocks, only prompts whose lengths agree modulo the block size; the key cannot
match otherwise, since a block's digest covers every block boundary before it). Positions are
the row's own (the canvas counts real tokens only, so left padding does not move them), so K is
reused after RoPE at the positions it was computed for.

``PromptKVStore`` holds the blocks, on the model's device, within a byte bound, least recently
used first out; a lookup touches a chain from its deepest block to its first, so a prefix
outlives its extensions. ``BlockCache`` consults it at its first refresh (``attach``): each row's
stored blocks are copied into the K/V buffers, the refresh forwards only from the first column
some row misses (rows are aligned on the same block columns, so that is one batched forward), and
the prompt blocks it computed are stored for later requests.
"""
from __future__ import annotations

import hashlib
import threading
from array import array
from collections import OrderedDict
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(slots=True)
class PromptCacheStats:
    lookups: int = 0  # rows that consulted the store
    hit_rows: int = 0  # rows that found at least one block
    hit_blocks: int = 0  # blocks found
    tokens_reused: int = 0  # prompt tokens whose K/V came from the store (not recomputed)
    tokens_computed: int = 0  # prompt tokens the refresh computed
    inserted_blocks: int = 0
    evicted_blocks: int = 0


class PromptKVStore:
    """Per-layer K/V of whole prompt blocks, keyed by a digest of the tokens up to the block's
    end (a chain over blocks), at most ``max_bytes`` in all; least recently used out first."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self.bytes = 0
        self._blocks: OrderedDict[bytes, Tensor] = OrderedDict()  # digest -> (layers, 2, H_kv, len, D)
        self.stats = PromptCacheStats()
        self._lock = threading.Lock()  # the scheduler's thread writes; /metrics reads

    def __len__(self) -> int:
        return len(self._blocks)

    @staticmethod
    def chain(root: bytes, tokens: list[int], ends: list[int]) -> list[bytes]:
        """Digest of each block [ends[i - 1], ends[i]) of ``tokens``, chained from ``root``."""
        digests, previous, start = [], root, 0
        for end in ends:
            h = hashlib.blake2b(previous, digest_size=16)
            h.update(array("q", tokens[start:end]).tobytes())
            previous = h.digest()
            digests.append(previous)
            start = end
        return digests

    def match(self, digests: list[bytes]) -> list[Tensor]:
        """The stored blocks of the longest stored chain prefix of ``digests`` (touched)."""
        with self._lock:
            found = []
            for digest in digests:
                block = self._blocks.get(digest)
                if block is None:
                    break
                found.append(block)
            for digest in reversed(digests[: len(found)]):  # deepest first: the first block ends most recent
                self._blocks.move_to_end(digest)
            return found

    def insert(self, digests: list[bytes], blocks: list[Tensor]) -> None:
        """Store a chain's blocks (those already stored are touched), then evict down to the bound."""
        with self._lock:
            for digest, block in zip(digests, blocks):
                if digest in self._blocks or block.nbytes > self.max_bytes:
                    continue
                self._blocks[digest] = block
                self.bytes += block.nbytes
                self.stats.inserted_blocks += 1
            for digest in reversed(digests):
                if digest in self._blocks:
                    self._blocks.move_to_end(digest)
            while self.bytes > self.max_bytes:
                _, block = self._blocks.popitem(last=False)
                self.bytes -= block.nbytes
                self.stats.evicted_blocks += 1

    def count(self, **deltas: int) -> None:
        with self._lock:
            for name, value in deltas.items():
                setattr(self.stats, name, getattr(self.stats, name) + value)

    def clear(self) -> None:
        with self._lock:
            self._blocks.clear()
            self.bytes = 0


def block_cache_of(model, cache):
    """The BlockCache whose first refresh computes the prompt's K/V once, where prompt reuse is
    exact: a block-causal model under the prefix or dual cache (or adaptive, which is dual for
    these models); None otherwise (cache "none" recomputes the prompt at every forward)."""
    from dllm.cache.adaptive import AdaptiveCache
    from dllm.cache.block import BlockCache

    if model.attention != "block_causal" or model.config.block_origin == "prompt":  # D2F: one prompt block
        return None
    if isinstance(cache, AdaptiveCache):
        cache = cache.exact
    return cache if isinstance(cache, BlockCache) else None


def attach(state, store: PromptKVStore | None) -> bool:
    """Have ``state``'s cache (a DecodeState's) use ``store`` at its first refresh, when reuse is
    exact there (``block_cache_of``); False otherwise (and nothing changes)."""
    if store is None or store.max_bytes == 0:
        return False
    cache = block_cache_of(state.model, state.cache)
    if cache is None:
        return False
    if cache.kv is not None:
        raise RuntimeError("attach the prompt store before the first forward")
    cache.prompt_reuse = PromptReuse(store, state.model)
    return True


class PromptReuse:
    """One decode's use of the store: ``load`` before the first refresh, ``save`` after it."""

    def __init__(self, store: PromptKVStore, model) -> None:
        self.store = store
        cfg = model.config
        self.size = cfg.block_size
        # what besides the tokens fixes a block's K/V: the weights (this model object), their
        # dtype and device, the block size (and so the partition, given each block's end)
        self.root = hashlib.blake2b(repr((id(model), str(model.dtype), str(model.device), cfg.block_size,
                                          getattr(cfg, "block_origin", None))).encode(), digest_size=16).digest()
        self._rows: list[tuple[int, list[int], list[bytes], int]] = []  # (first column, ends, digests, reused)

    def ends(self, length: int) -> list[int]:
        """Block ends of a prompt of ``length`` tokens, from the answer start back (the last one
        is ``length``; an absolute-origin engine prompt is whole blocks, so this is its partition
        too)."""
        return sorted({length - k * self.size for k in range(length // self.size + 1)} - {0})

    def load(self, canvas, kv) -> int:
        """Copy each row's stored prompt blocks into ``kv``; returns the first canvas column the
        refresh must compute (every row's K/V before it is in ``kv`` or is padding): the first
        block some row misses. Every row's block ends fall on the canvas's block boundaries
        (counted back from P; rows are aligned there), so a row's blocks lie wholly before it or
        wholly after."""
        P = canvas.prompt_width
        tokens = canvas.tokens[:, :P].tolist()
        lengths = canvas.prompt_lengths.tolist()
        found_rows = []
        for row, length in enumerate(lengths):
            first = P - length
            prompt = tokens[row][first:]
            ends = self.ends(length)
            digests = self.store.chain(self.root, prompt, ends)
            found = self.store.match(digests)
            reused = ends[len(found) - 1] if found else 0
            self._rows.append((first, ends, digests, reused))
            found_rows.append(found)
        start = min((first + reused for first, _, _, reused in self._rows), default=P)
        # down to a canvas block boundary (blocks counted back from P): a row's first column need
        # not be one (answer-origin blocks), and the refresh's first block must be whole in every row
        start = max(0, P - -(-(P - start) // self.size) * self.size)
        tokens_reused = 0
        for row, (found, (first, ends, _, reused)) in enumerate(zip(found_rows, self._rows)):
            keep = sum(1 for end in ends[: len(found)] if first + end <= start)  # blocks before start
            if keep:
                blocks = torch.cat(found[:keep], dim=3) if keep > 1 else found[0]
                width = blocks.shape[3]
                for i, (k, v) in enumerate(kv.layers):
                    k[row, :, first : first + width].copy_(blocks[i, 0])
                    v[row, :, first : first + width].copy_(blocks[i, 1])
                tokens_reused += width
        self.store.count(lookups=len(lengths), hit_rows=sum(bool(f) for f in found_rows),
                         hit_blocks=sum(len(f) for f in found_rows), tokens_reused=tokens_reused,
                         tokens_computed=sum(lengths) - tokens_reused)
        return start

    def save(self, kv) -> None:
        """Store every row's prompt blocks the store lacks (after the first refresh, when the
        buffers hold the whole prompt's final K/V)."""
        for row, (first, ends, digests, reused) in enumerate(self._rows):
            missing = [(i, end) for i, end in enumerate(ends) if end > reused]
            if not missing:
                continue
            lo = first + (ends[missing[0][0] - 1] if missing[0][0] else 0)
            span = torch.stack([torch.stack((k[row, :, lo : first + ends[-1]], v[row, :, lo : first + ends[-1]]))
                                for k, v in kv.layers])  # (layers, 2, H_kv, len, D)
            blocks, at = [], lo
            for _, end in missing:
                blocks.append(span[:, :, :, at - lo : first + end - lo].clone())
                at = first + end
            self.store.insert([digests[i] for i, _ in missing], blocks)
        self._rows = []
