"""How a module tensor is assembled from checkpoint tensors, and back.

Most tensors are stored one to one. Some are not: LLaDA2 fuses q, k and v in one
``query_key_value`` (dllm splits it at load, so prepacking, the memory plan and a future
per-head tensor-parallel split see plain q/k/v projections), and MoE checkpoints store one
tensor per expert where dllm's MoE layer holds them stacked. A ``Source`` names the pieces:
whole checkpoint tensors or row ranges of them, so a loader can read exactly the slices it needs
(``safe_open(...).get_slice(name)[lo:hi]``), which is also what a per-rank read will do.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import Tensor


@dataclass(frozen=True, slots=True)
class Piece:
    """A checkpoint tensor, or rows [lo, hi) of its first dimension, or (``inner``) [lo, hi) of
    its second (DiffusionGemma's experts fuse gate and up as (E, 2I, d): each is one range)."""

    name: str
    rows: tuple[int, int] | None = None
    inner: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class Source:
    """The pieces of one module tensor: concatenated along dim 0, or (``stack``) stacked on a
    new dim 0 (per-expert tensors into an (E, ...) parameter)."""

    pieces: tuple[Piece, ...]
    stack: bool = False

    @property
    def whole(self) -> bool:
        """One whole checkpoint tensor, stored as is."""
        return len(self.pieces) == 1 and self.pieces[0].rows is None and not self.stack


def one(name: str) -> Source:
    return Source((Piece(name),))


def rows_of(name: str, lo: int, hi: int) -> Source:
    return Source((Piece(name, (lo, hi)),))


def inner_of(name: str, lo: int, hi: int) -> Source:
    """[lo, hi) of the second dimension of a checkpoint tensor (all of its first)."""
    return Source((Piece(name, inner=(lo, hi)),))


def stacked(names: Iterable[str]) -> Source:
    return Source(tuple(Piece(n) for n in names), stack=True)


MLP_PROJ = ("gate_proj", "up_proj", "down_proj")


def mlp_sources(m: str, p: str, cfg, i: int, *, shared: str) -> dict[str, Source]:
    """Layer i's MLP as every MoE family stores it: dense ``{p}mlp.{proj}.weight`` outside
    ``cfg.moe_layers``; else the router ``{p}mlp.gate.weight``, the experts ``{p}mlp.experts.{e}``
    stacked into MoEMLP's ``(E, ...)`` parameters, and the shared expert under ``shared``."""
    if i not in cfg.moe_layers:
        return {f"{m}mlp.{w}.weight": one(f"{p}mlp.{w}.weight") for w in MLP_PROJ}
    out = {f"{m}mlp.router.weight": one(f"{p}mlp.gate.weight")}
    for w in MLP_PROJ:
        out[f"{m}mlp.{w}"] = stacked(f"{p}mlp.experts.{e}.{w}.weight" for e in range(cfg.moe.n_experts))
        if cfg.moe.shared_hidden:
            out[f"{m}mlp.shared.{w}.weight"] = one(f"{shared}.{w}.weight")
    return out


def checkpoint_shapes(sources: dict[str, Source], module_shapes: dict[str, tuple[int, ...]]
                      ) -> dict[str, tuple[int, ...]]:
    """Checkpoint name -> the shape its module tensors imply (a row-split tensor has as many
    rows as its last piece ends at)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for module, src in sources.items():
        shape = module_shapes[module]
        for piece in src.pieces:
            if src.stack:
                shapes[piece.name] = tuple(shape[1:])
            elif piece.inner is not None:
                inner = max(piece.inner[1], shapes.get(piece.name, (0, 0))[1])
                shapes[piece.name] = (shape[0], inner, *shape[2:])
            elif piece.rows is None:
                shapes[piece.name] = tuple(shape)
            else:
                rows = max(piece.rows[1], shapes.get(piece.name, (0,))[0])
                shapes[piece.name] = (rows, *shape[1:])
    return shapes


def assemble(src: Source, read: Callable[[Piece], Tensor]) -> Tensor:
    """The module tensor from its pieces; ``read`` returns one piece (already sliced)."""
    parts = [read(p) for p in src.pieces]
    if src.stack:
        return torch.stack(parts)
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def to_checkpoint(sources: dict[str, Source], state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Module state -> checkpoint tensors under their original names (fused and per-expert
    tensors rebuilt): the inverse of loading, used to write checkpoints."""
    out: dict[str, Tensor] = {}
    row_parts: dict[str, list[tuple[int, Tensor]]] = {}
    inner_parts: dict[str, list[tuple[int, Tensor]]] = {}
    for module, src in sources.items():
        tensor = state[module]
        if src.pieces[0].inner is not None:
            inner_parts.setdefault(src.pieces[0].name, []).append((src.pieces[0].inner[0], tensor))
            continue
        if src.stack:
            for e, piece in enumerate(src.pieces):
                out[piece.name] = tensor[e]
            continue
        at = 0
        for piece in src.pieces:
            if piece.rows is None and len(src.pieces) == 1:
                out[piece.name] = tensor
                continue
            lo, hi = piece.rows if piece.rows is not None else (0, None)
            n = (hi - lo) if hi is not None else tensor.shape[0] - at
            row_parts.setdefault(piece.name, []).append((lo, tensor[at: at + n]))
            at += n
    for name, parts in row_parts.items():
        out[name] = torch.cat([t for _, t in sorted(parts, key=lambda p: p[0])])
    for name, parts in inner_parts.items():
        out[name] = torch.cat([t for _, t in sorted(parts, key=lambda p: p[0])], dim=1)
    return out
