"""Fast-dLLM's block start: the block's first position takes its token from the refresh forward.

Fast-dLLM's Dream loop (``dream/model/generation_utils_block.py``) and v2 loop commit each
block's first position from the block-start forward (argmax at temperature 0; the step's sampled
token otherwise) and nothing else at that step; the rule decides from the next forward on. This
wrapper does that around any rule, so every strategy honours it; rows whose first position is
no longer masked get the rule's own choice. Chosen with ``cache_args={"first_token": "argmax"}``.
"""
from __future__ import annotations

import torch
from torch import Tensor

from dllm.samplers.base import RuleInput, UnmaskingRule


class FirstTokenFromRefresh:
    def __init__(self, rule: UnmaskingRule, state) -> None:
        self.rule, self.state = rule, state

    def __call__(self, inp: RuleInput) -> Tensor:
        commit = self.rule(inp)
        state = self.state
        if (state.bs - state.canvas.prompt_width) % state.config.block_length:
            return commit  # a later sub-block of the block: the rule alone
        at_start = torch.as_tensor(inp.step, device=commit.device).expand(commit.shape[0]) == 0
        forced = at_start & inp.eligible[:, 0]  # (B,)
        first = torch.zeros_like(commit)
        first[:, 0] = True
        return torch.where(forced[:, None], first, commit)
