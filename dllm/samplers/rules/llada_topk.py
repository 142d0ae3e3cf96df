"""LLaDA's reference rules: commit a scheduled number of tokens per step, chosen by confidence
(``low_confidence``) or uniformly at random (``random``, from each row's own random stream).

``schedule="masks"`` (default, LLaDA's ``get_num_transfer_tokens``) divides the masks a row had
at block start over the block's steps: base = m // s, and the first m % s steps take one more,
counted per row. ``schedule="block"`` divides the decision window's length (the block, or the
sub-block) instead, whatever part of it is already decided: the quota of LLaDA2.0's
``generate`` and SDAR's ``block_diffusion_generate``. The two differ only on a window that
starts with decided tokens, e.g. the prompt tail leading the first block of a block-causal model
whose blocks count from position 0 (dllm/engine/block_alignment.py); a quota above the masks left
takes them all.

``low_confidence`` with ``tau`` also commits every eligible position whose probability is
strictly above ``tau``: LLaDA2.0's rule (take all of those when there are at least the quota,
else the quota's most probable, which includes them), and SDAR's ``low_confidence_dynamic``.
``rank="neg_entropy"`` takes the positions above tau when they are at least the quota, else the
quota's lowest-entropy positions: LoPA's released D2F loop with ``sampling_strategy=neg_entropy``,
whose fully active blocks fall back to their highest-confidence position in that measure.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from dllm.samplers.base import RuleInput, register_rule, topk_mask

SCHEDULES = ("masks", "block")
RANKS = ("prob", "neg_entropy")


def transfer_count(block_masks: Tensor, num_steps: int, step: int | Tensor) -> Tensor:
    """(B,) tokens to commit at ``step`` of a block that started with ``block_masks`` masks."""
    base = block_masks // num_steps
    return base + (step < block_masks % num_steps)  # the bool adds as 0 / 1: no cast of its own


def scheduled_count(inp: RuleInput, schedule: str) -> Tensor:
    """(B,) this step's quota: the row's block masks (``masks``) or the window length
    (``block``) divided over the window's steps."""
    if schedule == "block":
        width = torch.full_like(inp.block_masks, inp.eligible.shape[-1])
        return transfer_count(width, inp.num_steps, inp.step)
    return transfer_count(inp.block_masks, inp.num_steps, inp.step)


@dataclass(kw_only=True, slots=True)
class ScheduledTopK:
    """Commit the k highest-scoring eligible positions, k from the per-row schedule."""

    reads_eligible_only = True  # statistics of masked positions only

    schedule: Literal["masks", "block"] = "masks"

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")

    def score(self, inp: RuleInput) -> Tensor:
        raise NotImplementedError

    def __call__(self, inp: RuleInput) -> Tensor:
        return topk_mask(self.score(inp), scheduled_count(inp, self.schedule), inp.eligible)


@register_rule("low_confidence")
@dataclass(kw_only=True, slots=True)
class LowConfidence(ScheduledTopK):
    """Commit the k most probable predictions, and with ``tau`` every prediction more
    probable than tau."""

    tau: float | None = None
    rank: Literal["prob", "neg_entropy"] = "prob"  # what the quota's positions are chosen by

    def __post_init__(self) -> None:
        ScheduledTopK.__post_init__(self)
        if self.tau is not None and not 0 <= self.tau <= 1:
            raise ValueError(f"low_confidence tau must be a probability in [0, 1], got {self.tau}")
        if self.rank not in RANKS:
            raise ValueError(f"low_confidence rank must be one of {RANKS}, got {self.rank!r}")

    def score(self, inp: RuleInput) -> Tensor:
        return inp.stats.prob if self.rank == "prob" else -inp.stats.entropy

    def __call__(self, inp: RuleInput) -> Tensor:
        commit = ScheduledTopK.__call__(self, inp)
        if self.tau is None:
            return commit
        above = inp.eligible & (inp.stats.prob > self.tau)
        if self.rank == "prob":  # the quota's most probable include every position above tau
            return commit | above
        enough = above.sum(-1, keepdim=True) >= scheduled_count(inp, self.schedule)[:, None]
        return torch.where(enough, above, commit)  # the quota by entropy only when tau falls short

    def passes(self, inp: RuleInput) -> Tensor:
        """The positions strictly above tau alone, no quota (a pipeline's semi-active block)."""
        if self.tau is None:
            raise ValueError("low_confidence has no threshold without tau; give policy_args={'tau': ...}")
        return inp.eligible & (inp.stats.prob > self.tau)


@register_rule("random")
@dataclass(kw_only=True, slots=True)
class RandomTopK(ScheduledTopK):
    """Commit k uniformly random masked positions."""

    def score(self, inp: RuleInput) -> Tensor:
        return inp.uniform()
