"""No cache: every forward recomputes the whole canvas (the reference behaviour); for a
block-causal model, the canvas up to the end of the window's model block, the rest being
invisible to it."""
from __future__ import annotations

from torch import Tensor

from dllm.cache.base import register_cache
from dllm.runner.model_runner import ModelRunner


@register_cache("none", cache_args=())
class NoCache:
    peak_bytes = 0  # no buffers

    def __init__(self, *, block_length: int, sub_block_length: int | None = None) -> None:
        """Block geometry is accepted for a uniform factory call; nothing is stored."""

    def block_logits(self, runner: ModelRunner, tokens: Tensor, bs: int, be: int, step: int,
                     rows: Tensor | None = None, count: Tensor | None = None) -> Tensor:
        shift = int(runner.shift_logits)  # position i reads output i - 1; bs >= 1 (prompts are non-empty)
        # block-causal: no later model block reaches the window, so the forward ends with the
        # window's own (as the cached modes and Fast-dLLM v2's loop do; answer-wide stoppers
        # then see the same positions in every mode)
        end = runner.model_blocks(bs, be)[1] if runner.model.attention == "block_causal" else runner.live_end
        return runner.forward(tokens[:, :end], 0, rows=rows, count=count, logits_for=(bs - shift, be - shift))
