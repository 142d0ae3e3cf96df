"""Preallocated per-layer KV buffers, written in place with static shapes."""
from __future__ import annotations

import weakref

import torch
from torch import Tensor

from dllm.runner.graphs import bucket


class KVBuffers:
    """``layers[i] = (k, v)``, each (B, H_kv, L, D): one slot per canvas position."""

    def __init__(self, layers: list[tuple[Tensor, Tensor]], slot=None) -> None:
        self.layers = layers
        self.slot = slot  # the static slot of a graph runner these buffers are views of (None: own)
        self._candidate_slots: dict[int, object] = {}  # by batch bucket: where select() copies (graphs)

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

    def select(self, rows: Tensor, graphs=None) -> "KVBuffers":
        """A copy holding row ``rows[j]`` at j: candidate states share their row's cache.

        With ``graphs`` (the decode replays CUDA graphs) the copy is written into a static slot of
        the candidates' batch bucket, leased at its first use by these buffers and returned with
        them, so candidate forwards (FreeDave's drafts, LoPA's branches) replay too: a graph
        writes its K/V at fixed addresses."""
        if graphs is None:
            return KVBuffers([(k.index_select(0, rows), v.index_select(0, rows)) for k, v in self.layers])
        C = rows.shape[0]
        slot = self._candidate_slots.get(bucket(C))
        if slot is None:
            k0 = self.layers[0][0]
            _, slot = graphs.lease((C, *k0.shape[1:]), len(self.layers), k0.dtype, k0.device)
            weakref.finalize(self, slot.release)
            self._candidate_slots[bucket(C)] = slot
        out = []
        for (k, v), (sk, sv) in zip(self.layers, slot.layers):
            out.append((torch.index_select(k, 0, rows, out=sk[:C]), torch.index_select(v, 0, rows, out=sv[:C])))
        return KVBuffers(out, slot)
