"""No cache: every forward recomputes the whole canvas (the reference behaviour)."""
from __future__ import annotations

from torch import Tensor

from dllm.cache.base import register_cache
from dllm.runner import ModelRunner


@register_cache("none")
class NoCache:
    peak_bytes = 0  # no buffers

    def __init__(self, *, block_length: int, sub_block_length: int | None = None) -> None:
        """Block geometry is accepted for a uniform factory call; nothing is stored."""

    def block_logits(self, runner: ModelRunner, tokens: Tensor, bs: int, be: int, step: int,
                     rows: Tensor | None = None, count: Tensor | None = None) -> Tensor:
        shift = int(runner.shift_logits)  # position i reads output i - 1; bs >= 1 (prompts are non-empty)
        return runner.forward(tokens[:, : runner.live_end], 0, rows=rows, count=count,
                              logits_for=(bs - shift, be - shift))
