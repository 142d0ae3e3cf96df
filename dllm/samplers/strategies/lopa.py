"""LoPA, lookahead parallel decoding (Xu et al. 2025): search the token-filling order.

Each round: the anchor takes one step of the wrapped rule (from the statistics of its own
forward); branch j additionally fills the j-th most confident position still masked in the
anchor. Anchor and branches go through one batched forward (``evaluate_candidates``); each
candidate's confidence is the mean over its remaining masks of the max probability
(``confidence="prob"``) or of the negative entropy (``"neg_entropy"``, the released default);
the best candidate (the anchor competes and wins ties) becomes the state, and its statistics
drive the next round's rule step, so a round costs one forward.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from dllm.kernels import TokenStats
from dllm.samplers.base import register_strategy, topk_mask
from dllm.samplers.strategies.candidates import evaluate_candidates

CONFIDENCES = ("prob", "neg_entropy")


@register_strategy("lopa")
@dataclass(kw_only=True, slots=True)
class LoPA:
    branches: int = 2  # lookahead branches besides the anchor
    confidence: str = "neg_entropy"
    pending: TokenStats | None = field(default=None, repr=False)
    window: tuple[int, int] = field(default=(-1, -1), repr=False)

    @property
    def candidate_rows(self) -> int:
        """Rows one canvas row occupies in a forward: the anchor and its branches (dllm.memory)."""
        return self.branches + 1

    def __post_init__(self) -> None:
        if self.branches < 0:
            raise ValueError(f"branches must be >= 0, got {self.branches}")
        if self.confidence not in CONFIDENCES:
            raise ValueError(f"LoPA confidence {self.confidence!r}; known: {CONFIDENCES}")

    def step(self, state) -> None:
        B, N = state.tokens.shape[0], self.branches + 1
        if self.pending is None or self.window != (state.bs, state.be):  # a new window (or pipeline range)
            self.pending = state.statistics(state.block_logits())
            self.window = (state.bs, state.be)
        stats = self.pending
        block = slice(state.bs, state.be)
        commit = state.rule(state.rule_input(stats))
        commit = state.stopper(state, stats, commit)
        anchor = state.tokens.clone()
        anchor[:, block] = torch.where(commit & state.eligible(), stats.token, anchor[:, block])
        candidates = self.spawn(state, anchor, stats)  # (B, N, L), anchor first
        unfinished = state.eligible(candidates.flatten(0, 1)).reshape(B, -1).any(-1)  # (B,)
        if not bool(unfinished.any()):
            state.commit(anchor[:, block] != state.tokens[:, block], anchor[:, block])
            self.pending = None  # block complete: the next block starts with a fresh forward
            return
        rows = torch.arange(B, device=anchor.device).repeat_interleave(N)
        flat = candidates.reshape(B * N, -1)
        ahead = state.row_step[rows] + 1  # every candidate is one step past the state
        cand_stats = evaluate_candidates(state, flat, rows, count=unfinished, steps=ahead)  # (B*N, W)
        score = self.score(state.eligible(flat), cand_stats).reshape(B, N)
        winner = score.argmax(-1)  # first max: the anchor wins ties
        chosen = candidates[torch.arange(B, device=anchor.device), winner]
        state.commit(chosen[:, block] != state.tokens[:, block], chosen[:, block])
        self.pending = cand_stats.index(torch.arange(B, device=anchor.device) * N + winner)

    def spawn(self, state, anchor: Tensor, stats: TokenStats) -> Tensor:
        """(B, N, L): the anchor, then branch j = anchor + its j-th most confident mask filled
        (a row with fewer masks repeats the anchor, which then wins the tie)."""
        block = slice(state.bs, state.be)
        masked = state.eligible(anchor)  # (B, W): the masks this row may fill
        out = [anchor]
        taken = torch.zeros_like(masked)
        for j in range(self.branches):
            pick = topk_mask(stats.prob, torch.full_like(masked[:, 0], j + 1, dtype=torch.long), masked) & ~taken
            taken |= pick
            branch = anchor.clone()
            branch[:, block] = torch.where(pick, stats.token, anchor[:, block])
            out.append(branch)
        return torch.stack(out, 1)

    def score(self, masked: Tensor, stats: TokenStats) -> Tensor:
        """Mean confidence over each candidate's remaining masks (+inf when none remain)."""
        conf = stats.prob if self.confidence == "prob" else -stats.entropy
        count = masked.sum(-1)
        mean = (conf.float() * masked).sum(-1) / count.clamp_min(1)
        return torch.where(count > 0, mean, torch.full_like(mean, float("inf")))
