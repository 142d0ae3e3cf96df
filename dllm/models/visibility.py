"""Which keys each query may attend to, described without a (queries x keys) mask.

A dense boolean mask costs T x S bytes per forward (and SDPA turns it into T x S floats on
CPU), which is what stops long canvases. The two rules the runtime needs have a compact form:

* key padding: a per-row (B, S) validity vector (left padding, a truncated end), passed to
  SDPA as a broadcastable (B, 1, 1, S) mask, or no mask at all when every key is real, so the
  fused (flash / memory-efficient) backends stay reachable;
* block-causal attention: queries of one model block see the keys of that block and earlier
  ones, i.e. a key *length* per query block. ``spans`` lists (query start, query end, key end)
  for the forward's queries and the attention runs one call per span on the key prefix.

Two callers pass a dense (T, S) ``allowed`` matrix instead: training, whose block diffusion
two-copy layout (a clean copy of the answer beside its noisy copies, each noisy block seeing the
clean blocks before it and itself; ``block_diffusion_copies``) is no key prefix, small there; and
a CUDA-graph replay of a block-causal forward (``runner/graphs.py``), whose key ends are data so
that one captured graph serves every block.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True, slots=True)
class KeyVisibility:
    """valid: (B, S) bool, False for keys that are not real tokens; None = every key is real.
    spans: block-causal rule as ((q_lo, q_hi, key_end), ...) over the forward's query indices:
    queries [q_lo, q_hi) see keys [0, key_end) only; None = every query sees every key.
    allowed: (T, S) bool, True where a query may see a key (training's two-copy layout, and the
    block-causal rule of a CUDA-graph replay); combined with ``valid``, and exclusive with ``spans``."""

    valid: Tensor | None = None
    spans: tuple[tuple[int, int, int], ...] | None = None
    allowed: Tensor | None = None

    def __post_init__(self) -> None:
        if self.allowed is not None and self.spans is not None:
            raise ValueError("KeyVisibility takes spans or an allowed matrix, not both")

    def segments(self, q_len: int, key_len: int) -> tuple[tuple[int, int, int], ...]:
        """(q_lo, q_hi, key_end) pieces covering the queries: one piece without spans."""
        return self.spans if self.spans is not None else ((0, q_len, key_len),)


def block_causal_spans(q_start: int, q_len: int, key_len: int, *, prompt_width: int,
                       block_size: int, prompt_block: bool = False) -> tuple[tuple[int, int, int], ...]:
    """Spans of the block-causal rule for canvas queries [q_start, q_start + q_len).

    Blocks of ``block_size`` are counted from the prompt width (the answer start), so a
    left-padded row sees the same partition as alone; the prompt is cut into blocks counted
    back from it, or (``prompt_block``, D2F's block origin "prompt") is one block. A query in
    block b sees keys before ``prompt_width + (b + 1) * block_size``.
    """
    spans, q, q_end = [], q_start, q_start + q_len
    while q < q_end:
        block_end = prompt_width + ((q - prompt_width) // block_size + 1) * block_size
        if prompt_block and q < prompt_width:
            block_end = prompt_width
        hi = min(block_end, q_end)
        spans.append((q - q_start, hi - q_start, min(block_end, key_len)))
        q = hi
    return tuple(spans)
