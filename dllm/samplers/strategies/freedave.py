"""FreeDave (Wu & Zhang 2025): lossless draft-and-verify around a deterministic base rule.

From the verified state x and the statistics of its own forward, draft k (k = 1..K) applies the
base rule k times with those statistics (draft 1 is exactly the base rule's next state). All K
drafts go through one batched forward; target k = one more base step from draft k's own
statistics. Draft j+1 is accepted while it equals target j, so the accepted draft lies on the
base rule's own trajectory: the output equals the base decode token for token. The accepted
draft's statistics seed the next round, so each round costs one (K-wide) forward.

With ``threshold`` as the base rule this is FreeDave++: re-applying the threshold rule to stale
statistics adds the next most confident token, the paper's static extra steps.

Rows of a batch accept different numbers of drafts, so each row keeps its own step count
(``state.row_step``): schedules and each row's random stream read it, which keeps the output
equal to the base decode for every rule, at every temperature, in any batch. A row with nothing
left to decode takes no step, and a draft that completes the block, or makes the row's text
final (``stop_at_eos``: where the base decode stops the row), ends the chain.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from dllm.kernels import TokenStats
from dllm.samplers.base import register_strategy
from dllm.samplers.strategies.candidates import evaluate_candidates


def rule_steps(state, tokens: Tensor, stats: TokenStats, depth: int, rows: Tensor | None = None,
               first_step: Tensor | None = None) -> list[Tensor]:
    """Canvases after 1..depth base-rule steps from ``tokens`` with fixed ``stats``; the first
    step is each state's ``first_step`` (default: its row's ``row_step``). A constrained row's
    step keeps only the commits that leave its canvas completable, as the base decode's commit
    does (``DecodeState.keep_completable``), so step 1 is the constrained base step itself."""
    if first_step is None:
        first_step = state.row_step if rows is None else state.row_step[rows]
    step = first_step
    out, cur = [], tokens
    for d in range(depth):
        commit = state.rule(state.rule_input(stats, cur, rows=rows, step=step + d))
        if state.constraints is not None:
            commit = state.keep_completable(commit, stats.token, cur, rows=rows, scores=stats.prob)
        block = cur[:, state.bs : state.be]
        cur = cur.clone()
        cur[:, state.bs : state.be] = torch.where(commit, stats.token, block)
        out.append(cur)
    return out


def block_statistics(strategy, state) -> TokenStats:
    """The statistics a self-drafting strategy (FreeDave, SSD) drafts from: those its last verify
    forward left for the state it moved to, or, at a block's start, one forward of the block."""
    if strategy.pending is None or strategy.block_start != state.bs:
        strategy.block_start = state.bs
        return state.statistics(state.block_logits())
    return strategy.pending


def refuse_refreshes(name: str, config) -> None:
    """Refuse the cache refreshes a candidate forward cannot reproduce (FreeDave, SSD): refreshes
    keyed on rounds (``refresh_every``, adaptive ``prompt_every`` / ``response_every``) or written
    back by the canvas forward (adaptive ``select="window"`` with ``ratio < 1``). Candidate
    forwards read the block start's K/V; the base decode's would not, so its answer differs."""
    args = config.cache_args
    periodic = [key for key in ("refresh_every", "prompt_every", "response_every") if args.get(key)]
    if periodic:
        raise ValueError(f"{name} is lossless only when a forward depends on the block start and the canvas; "
                         f"cache_args {periodic} refresh the K/V every N rounds, which candidate forwards "
                         "never do: drop them")
    if config.cache == "adaptive" and args.get("select") == "window" and args.get("ratio", 0.25) < 1:
        raise ValueError(f"{name} is lossless only when a forward depends on the block start and the canvas; "
                         "adaptive select='window' with ratio < 1 writes each canvas forward's refresh back: "
                         "use select='read' (the default) or ratio=1.0")


def leaves_work(state, flat: Tensor) -> Tensor:
    """(N,) whether each candidate canvas of ``flat`` (N, L; K per canvas row) leaves work: masks
    in the active block (a prompt tail's mask id is none) and text not yet final (the base decode
    stops where it leaves none)."""
    return state.eligible(flat).any(-1) & ~state.text_final(flat)


@register_strategy("freedave")
@dataclass(kw_only=True, slots=True)
class FreeDave:
    num_drafts: int = 4
    pending: TokenStats | None = field(default=None, repr=False)
    block_start: int = field(default=-1, repr=False)

    @property
    def candidate_rows(self) -> int:
        """Rows one canvas row occupies in a forward: its K drafts (dllm.engine.memory)."""
        return self.num_drafts

    def __post_init__(self) -> None:
        if self.num_drafts < 1:
            raise ValueError(f"num_drafts must be >= 1, got {self.num_drafts}")

    def check_config(self, config) -> None:
        """Refuse what would make a draft's state differ from the base decode's state."""
        if config.stopper != "none":
            raise ValueError("freedave verifies the base rule alone; use stopper='none'")
        refuse_refreshes("freedave", config)

    def step(self, state) -> Tensor:
        """One round; returns the base-rule steps each row took (its accepted drafts)."""
        self.check_config(state.config)
        B, K = state.tokens.shape[0], self.num_drafts
        self.pending = block_statistics(self, state)
        moving = state.moving_rows()  # (B,) rows with masks left; the others take no step
        drafts = torch.stack(rule_steps(state, state.tokens, self.pending, K), 1)  # (B, K, L)
        block = slice(state.bs, state.be)
        # (B, K): draft k leaves work (masks in the block, text not final); monotone in k
        flat = drafts.reshape(B * K, -1)
        open_ = leaves_work(state, flat).reshape(B, K)
        unfinished = open_[:, 0]
        if not bool(unfinished.any()):  # the base step leaves no work in any row: no forward needed
            state.commit(drafts[:, 0, block] != state.tokens[:, block], drafts[:, 0, block])
            self.pending = None
            return moving.long()
        rows = torch.arange(B, device=drafts.device).repeat_interleave(K)  # (B*K,)
        depth = torch.arange(1, K + 1, device=flat.device).repeat(B)  # draft k sits k steps ahead
        ahead = state.row_step[rows] + depth
        stats = evaluate_candidates(state, flat, rows, count=unfinished, steps=ahead)  # fields (B*K, W)
        targets = rule_steps(state, flat, stats, 1, rows=rows, first_step=ahead)[0].reshape(B, K, -1)
        # draft j+1 is on the base trajectory iff it equals target j; accept the longest chain,
        # up to the first draft that leaves no work (the base decode stops there)
        ok = (drafts[:, 1:] == targets[:, :-1]).all(-1)  # (B, K-1)
        accepted = 1 + ok.long().cumprod(-1).sum(-1)  # (B,) in [1, K]
        accepted = torch.minimum(accepted, (open_.sum(-1) + 1).clamp_max(K))
        accepted = torch.where(moving, accepted, 0)
        pick = torch.arange(B, device=flat.device) * K + accepted.clamp_min(1) - 1  # (B,) into flat
        chosen = flat[pick]  # (B, L)
        state.commit(chosen[:, block] != state.tokens[:, block], chosen[:, block])
        self.pending = stats.index(pick)
        return accepted
