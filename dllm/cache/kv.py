"""Preallocated per-layer KV buffers, written in place with static shapes."""
from __future__ import annotations

import torch
from torch import Tensor


class KVBuffers:
    """``layers[i] = (k, v)``, each (B, H_kv, L, D): one slot per canvas position."""

    def __init__(self, layers: list[tuple[Tensor, Tensor]]) -> None:
        self.layers = layers

    @staticmethod
    def shape(model, batch: int, length: int) -> tuple[int, int, int, int]:
        """Shape of one layer's K (or V) buffer."""
        return (batch, model.config.n_kv_heads, length, model.config.head_dim)

    @classmethod
    def allocate(cls, model, batch: int, length: int) -> "KVBuffers":
        shape = cls.shape(model, batch, length)
        make = lambda: torch.zeros(shape, dtype=model.dtype, device=model.device)  # noqa: E731
        return cls([(make(), make()) for _ in range(model.config.n_layers)])

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in self.layers)

    def select(self, rows: Tensor) -> "KVBuffers":
        """A copy holding row ``rows[j]`` at j: candidate states share their row's cache."""
        return KVBuffers([(k.index_select(0, rows), v.index_select(0, rows)) for k, v in self.layers])
