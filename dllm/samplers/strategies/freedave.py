"""FreeDave (Wu & Zhang 2025): lossless draft-and-verify around a deterministic base rule.

From the verified state x and the statistics of its own forward, draft k (k = 1..K) applies the
base rule k times with those statistics (draft 1 is exactly the base rule's next state). All K
drafts go through one batched forward; target k = one more base step from draft k's own
statistics. Draft j+1 is accepted while it equals target j, so the accepted draft lies on the
base rule's own trajectory: the output equals the base decode token for token. The accepted
draft's statistics seed the next round, so each round costs one (K-wide) forward.

With ``threshold`` as the base rule this is FreeDave++: re-applying the threshold rule to stale
statistics adds the next most confident token, the paper's static extra steps.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from dllm.kernels import TokenStats
from dllm.samplers.base import register_strategy
from dllm.samplers.strategies.candidates import evaluate_candidates


def rule_steps(state, tokens: Tensor, stats: TokenStats, depth: int, rows: Tensor | None = None,
               first_step: int | None = None) -> list[Tensor]:
    """Canvases after 1..depth base-rule steps from ``tokens`` with fixed ``stats``."""
    step = state.step if first_step is None else first_step
    out, cur = [], tokens
    for d in range(depth):
        commit = state.rule(state.rule_input(stats, cur, rows=rows, step=step + d))
        block = cur[:, state.bs : state.be]
        cur = cur.clone()
        cur[:, state.bs : state.be] = torch.where(commit, stats.token, block)
        out.append(cur)
    return out


@register_strategy("freedave")
@dataclass(kw_only=True, slots=True)
class FreeDave:
    num_drafts: int = 4
    pending: TokenStats | None = field(default=None, repr=False)
    row_step: Tensor | None = field(default=None, repr=False)  # (B,) base steps taken in the block
    block_start: int = field(default=-1, repr=False)

    @property
    def candidate_rows(self) -> int:
        """Rows one canvas row occupies in a forward: its K drafts (dllm.memory)."""
        return self.num_drafts

    def __post_init__(self) -> None:
        if self.num_drafts < 1:
            raise ValueError(f"num_drafts must be >= 1, got {self.num_drafts}")

    def step(self, state) -> None:
        if state.config.stopper != "none":
            raise ValueError("freedave verifies the base rule alone; use stopper='none'")
        B, K = state.tokens.shape[0], self.num_drafts
        if self.pending is None or self.block_start != state.bs:
            self.pending = state.statistics(state.block_logits())
            self.row_step = torch.zeros(B, dtype=torch.long, device=state.tokens.device)
            self.block_start = state.bs
        drafts = torch.stack(rule_steps(state, state.tokens, self.pending, K, first_step=self.row_step), 1)  # (B, K, L)
        block = slice(state.bs, state.be)
        unfinished = (drafts[:, 0, block] == state.mask_id).any(-1)  # (B,) draft 1 leaves masks
        if not bool(unfinished.any()):  # the base step completes the block: no forward needed
            state.commit(drafts[:, 0, block] != state.tokens[:, block], drafts[:, 0, block])
            self.pending = None
            return
        rows = torch.arange(B, device=drafts.device).repeat_interleave(K)  # (B*K,)
        flat = drafts.reshape(B * K, -1)
        stats = evaluate_candidates(state, flat, rows, count=unfinished)  # fields (B*K, W)
        depth = torch.arange(1, K + 1, device=flat.device).repeat(B)  # draft k sits k steps ahead
        targets = rule_steps(state, flat, stats, 1, rows=rows, first_step=self.row_step[rows] + depth)[0]
        targets = targets.reshape(B, K, -1)
        # draft j+1 is on the base trajectory iff it equals target j; accept the longest chain
        ok = (drafts[:, 1:] == targets[:, :-1]).all(-1)  # (B, K-1)
        accepted = 1 + ok.long().cumprod(-1).sum(-1)  # (B,) in [1, K]
        chosen = drafts[torch.arange(B, device=flat.device), accepted - 1]  # (B, L)
        state.commit(chosen[:, block] != state.tokens[:, block], chosen[:, block])
        self.row_step += accepted
        state.step += int(accepted.max()) - 1  # the engine adds one more
        self.pending = stats.index(torch.arange(B, device=flat.device) * K + accepted - 1)
