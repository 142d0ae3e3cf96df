"""LoPA, lookahead parallel decoding (Xu et al. 2025): search the token-filling order.

Each round: the anchor takes one step of the wrapped rule (from the statistics of its own
forward); branch j additionally fills the j-th most confident position still masked in the
anchor, confidence being the max probability (``confidence="prob"``) or the negative entropy
(``"neg_entropy"``, the released default), as the released code ranks them. Anchor and branches
go through one batched forward (``evaluate_candidates``); each candidate's score is the mean
confidence over its remaining masks; the best candidate becomes the state (``ties="anchor"``: the
anchor wins ties, so LoPA leaves the rule's own trajectory only for a strictly better score;
``"branches"``: the released loop's stable sort, lookahead branches first), and its statistics
drive the next round's rule step, so a round costs one forward. The released ``branching_factor``
f is ``branches=f`` (its competition mode spawns f lookahead branches beside the anchor).

Under the pipelined mode (dllm/engine/pipeline.py) each candidate adds its own block before the forward,
as the released loop's per-branch preprocessing does, so the winner's statistics already cover
the block it added and the next round reuses them (no fresh forward when the window moves).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from dllm.kernels import TokenStats
from dllm.samplers.base import register_strategy, topk_mask
from dllm.samplers.strategies.candidates import evaluate_candidates

CONFIDENCES = ("prob", "neg_entropy")
TIES = ("anchor", "branches")


@register_strategy("lopa")
@dataclass(kw_only=True, slots=True)
class LoPA:
    branches: int = 2  # lookahead branches besides the anchor
    confidence: str = "neg_entropy"
    ties: str = "anchor"  # who wins a tie of scores: the anchor, or the first lookahead branch
    pending: TokenStats | None = field(default=None, repr=False)
    window: tuple[int, int] = field(default=(-1, -1), repr=False)
    pipeline: object | None = field(default=None, repr=False)  # set by dllm.engine.pipeline.Pipelined

    @property
    def candidate_rows(self) -> int:
        """Rows one canvas row occupies in a forward: the anchor and its branches (dllm.engine.memory)."""
        return self.branches + 1

    def __post_init__(self) -> None:
        if self.branches < 0:
            raise ValueError(f"branches must be >= 0, got {self.branches}")
        if self.confidence not in CONFIDENCES:
            raise ValueError(f"LoPA confidence {self.confidence!r}; known: {CONFIDENCES}")
        if self.ties not in TIES:
            raise ValueError(f"LoPA ties {self.ties!r}; known: {TIES}")

    @property
    def grows_blocks(self) -> bool:
        """Whether this round's candidates add their own pipeline blocks (a forward is pending)."""
        return self.pending is not None

    def step(self, state) -> None:
        B, N = state.tokens.shape[0], self.branches + 1
        window = (state.bs, state.be)
        if self.pending is not None and self.window != window and self.pipeline is not None:
            # pipelined: the window only narrowed inside the last forward's (blocks finished)
            self.pending = self.pending.index((slice(None), slice(state.bs - self.window[0], state.be - self.window[0])))
            self.window = window
        if self.pending is None or self.window != window:  # a new window
            self.pending = state.statistics(state.block_logits())
            self.window = window
        stats = self.pending
        block = slice(state.bs, state.be)
        commit = state.rule(state.rule_input(stats))
        commit = state.stopper(state, stats, commit)
        commit = state.keep_completable(commit, stats.token, scores=stats.prob)  # a constrained row's base step
        anchor = state.tokens.clone()
        anchor[:, block] = torch.where(commit & state.eligible(), stats.token, anchor[:, block])
        candidates = self.spawn(state, anchor, stats)  # (B, N, L), anchor first
        rows = torch.arange(B, device=anchor.device).repeat_interleave(N)
        flat = candidates.reshape(B * N, -1)
        before = state.window_mask
        grown = self.pipeline.grow(state, flat, rows) if self.pipeline is not None else None
        if grown is not None:  # each candidate's own blocks in flight, its new block included
            state.be, state.window_mask = grown.be, grown.window_mask
        unfinished = state.eligible(flat).reshape(B, -1).any(-1)  # (B,)
        if grown is None:
            work = bool(unfinished.any())
        else:  # one read: is a forward needed, and how far do the candidates' blocks reach
            reach = torch.where(state.runner.active[rows], grown.added, 0).max()
            work, reach = torch.stack([unfinished.any().long(), reach]).tolist()
            state.be = min(state.be, max(window[1], state.canvas.prompt_width + reach * self.pipeline.size))
            state.window_mask = grown.window_mask[:, : state.be - state.bs]
        if not work:
            state.be, state.window_mask = window[1], before
            state.commit(anchor[:, block] != state.tokens[:, block], anchor[:, block])
            self.pending = None  # block complete: the next block starts with a fresh forward
            return
        ahead = state.row_step[rows] + 1  # every candidate is one step past the state
        cand_stats = evaluate_candidates(state, flat, rows, count=unfinished, steps=ahead)  # (B*N, W)
        score = self.score(state.eligible(flat), cand_stats).reshape(B, N)
        winner = self.pick(score)
        pick = torch.arange(B, device=anchor.device) * N + winner
        chosen = flat[pick]
        if grown is not None:
            state.window_mask = state.window_mask[pick]
            self.pipeline.added = torch.where(state.runner.active, grown.added[pick], self.pipeline.added)
        block = slice(state.bs, state.be)
        state.commit(chosen[:, block] != state.tokens[:, block], chosen[:, block])
        self.pending = cand_stats.index(pick)
        self.window = (state.bs, state.be)

    def pick(self, score: Tensor) -> Tensor:
        """(B,) the winning candidate: the first maximum, the anchor first or last in the order."""
        if self.ties == "anchor":
            return score.argmax(-1)
        flipped = torch.cat([score[:, 1:], score[:, :1]], -1).argmax(-1)  # branches, then the anchor
        return (flipped + 1) % score.shape[1]

    def spawn(self, state, anchor: Tensor, stats: TokenStats) -> Tensor:
        """(B, N, L): the anchor, then branch j = anchor + its j-th most confident mask filled
        (a row with fewer masks repeats the anchor, which then wins the tie; so does a
        constrained row's branch whose fill would leave its canvas without a word)."""
        block = slice(state.bs, state.be)
        masked = state.eligible(anchor)  # (B, W): the masks this row may fill
        out = [anchor]
        taken = torch.zeros_like(masked)
        conf = self.confidences(stats)
        for j in range(self.branches):
            pick = topk_mask(conf, torch.full_like(masked[:, 0], j + 1, dtype=torch.long), masked) & ~taken
            taken |= pick
            pick = state.keep_completable(pick, stats.token, anchor)  # a constrained row: the anchor if it would not be
            branch = anchor.clone()
            branch[:, block] = torch.where(pick, stats.token, anchor[:, block])
            out.append(branch)
        return torch.stack(out, 1)

    def confidences(self, stats: TokenStats) -> Tensor:
        return stats.prob if self.confidence == "prob" else -stats.entropy

    def score(self, masked: Tensor, stats: TokenStats) -> Tensor:
        """Mean confidence over each candidate's remaining masks (+inf when none remain)."""
        conf = self.confidences(stats)
        count = masked.sum(-1)
        mean = (conf.float() * masked).sum(-1) / count.clamp_min(1)
        return torch.where(count > 0, mean, torch.full_like(mean, float("inf")))
