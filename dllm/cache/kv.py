"""Preallocated per-layer KV buffers, written in place with static shapes."""
from __future__ import annotations

import weakref

import torch
from torch import Tensor


class KVBuffers:
    """``layers[i] = (k, v)``, each (B, H_kv, L, D): one slot per canvas position."""

    def __init__(self, layers: list[tuple[Tensor, Tensor]], slot=None) -> None:
        self.layers = layers
        self.slot = slot  # the static slot of a graph runner these buffers are views of (None: own)

    @staticmethod
    def shape(model, batch: int, length: int) -> tuple[int, int, int, int]:
        """Shape of one layer's K (or V) buffer."""
        return (batch, model.config.n_kv_heads, length, model.config.head_dim)

    @classmethod
    def allocate(cls, model, batch: int, length: int, graphs=None) -> "KVBuffers":
        """Zeroed buffers; with ``graphs`` (a ``dllm.runner.graphs.GraphRunner``: the decode
        replays CUDA graphs) views of one of its static slots, returned when these are freed."""
        shape = cls.shape(model, batch, length)
        if graphs is not None:
            layers, slot = graphs.lease(shape, model.config.n_layers, model.dtype, model.device)
            kv = cls(layers, slot)
            weakref.finalize(kv, slot.release)
            return kv
        make = lambda: torch.zeros(shape, dtype=model.dtype, device=model.device)  # noqa: E731
        return cls([(make(), make()) for _ in range(model.config.n_layers)])

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in self.layers)

    def select(self, rows: Tensor) -> "KVBuffers":
        """A copy holding row ``rows[j]`` at j: candidate states share their row's cache."""
        return KVBuffers([(k.index_select(0, rows), v.index_select(0, rows)) for k, v in self.layers])
