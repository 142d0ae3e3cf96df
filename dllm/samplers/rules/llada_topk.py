"""LLaDA's reference rules: commit a scheduled number of tokens per step, chosen by confidence
(``low_confidence``) or uniformly at random (``random``, from each row's own random stream).

The schedule divides the masks a row had at block start over the block's steps:
base = m // s, and the first m % s steps take one more (official ``get_num_transfer_tokens``),
counted per row.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from dllm.samplers.base import RuleInput, register_rule, topk_mask


def transfer_count(block_masks: Tensor, num_steps: int, step: int) -> Tensor:
    """(B,) tokens to commit at ``step`` of a block that started with ``block_masks`` masks."""
    base = block_masks // num_steps
    return base + (step < block_masks % num_steps).long()


@register_rule("low_confidence")
@dataclass(kw_only=True, slots=True)
class LowConfidence:
    """Commit the k most probable predictions (k from the per-row block schedule)."""

    reads_eligible_only = True  # statistics of masked positions only

    def __call__(self, inp: RuleInput) -> Tensor:
        k = transfer_count(inp.block_masks, inp.num_steps, inp.step)
        return topk_mask(inp.stats.prob, k, inp.eligible)


@register_rule("random")
@dataclass(kw_only=True, slots=True)
class RandomTopK:
    """Commit k uniformly random masked positions (k from the per-row block schedule)."""

    reads_eligible_only = True  # statistics of masked positions only

    def __call__(self, inp: RuleInput) -> Tensor:
        k = transfer_count(inp.block_masks, inp.num_steps, inp.step)
        return topk_mask(inp.uniform(), k, inp.eligible)
