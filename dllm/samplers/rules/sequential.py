"""Left-to-right unmasking: commit the scheduled number of masked positions, leftmost first.

SDAR's ``remasking_strategy="sequential"`` (JetAstra/SDAR ``generate.py``
``block_diffusion_generate``) with ``schedule="block"``: the block's length divided evenly over
its denoising steps, the first masks of the block taken in order. ``schedule="masks"`` divides
the masks the block had at its start instead, as ``low_confidence`` does by default
(dllm/samplers/rules/llada_topk.py). The model's confidence plays no part; the tokens are the
step's argmax (or samples at temperature > 0).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from dllm.samplers.base import RuleInput, register_rule
from dllm.samplers.rules.llada_topk import ScheduledTopK


@register_rule("sequential")
@dataclass(kw_only=True, slots=True)
class Sequential(ScheduledTopK):
    """Commit the k leftmost masked positions (k from the per-row schedule)."""

    def score(self, inp: RuleInput) -> Tensor:
        W = inp.eligible.shape[-1]
        return -torch.arange(W, device=inp.eligible.device, dtype=torch.float32).expand_as(inp.eligible)
