"""SSD (Gao et al. 2025, arXiv 2510.04147): self speculative decoding through a verification tree.

Self-drafting: from the verified state x and its own forward's statistics, the base rule is
applied N times with those statistics (``freedave.rule_steps``): chain node j holds x after j
drafted steps, i.e. for a one-token-per-step rule the j positions this forward ranks first, with
this forward's tokens. The verification tree adds, for j = 2..N-1, a swap node: drafted steps
1..j-1 and j+1 without step j (the base decode's order when, once draft j-1 is in, draft j+1 is
the more confident). Every node goes through one batched forward, each at its depth in its row's
random stream. The walk starts at chain node 1 (the base step itself) and moves, depth by depth,
to the node that equals one base step from the current node's own statistics; it stops where no
node of the next depth matches, or at a node that leaves no work (block complete, or text final
under ``stop_at_eos``). Every move is a verified base step, so the output equals the base decode
token for token whatever the tree holds; the node where the walk stops seeds the next round, so a
round costs one forward. With a one-token-per-step rule (``steps == gen_length``) the base decode
is the paper's stepwise decoding.

Refused where a candidate state cannot be the base decode's state: a stopper (it commits outside
the rule's steps), and cache refreshes keyed on rounds or written back by the canvas forward
(``refresh_every``, adaptive ``prompt_every`` / ``response_every``, ``select="window"`` with
``ratio < 1``): candidate forwards read the block start's K/V, the base decode's would not.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from dllm.kernels import TokenStats
from dllm.samplers.base import register_strategy
from dllm.samplers.strategies.candidates import evaluate_candidates
from dllm.samplers.strategies.freedave import block_statistics, leaves_work, refuse_refreshes, rule_steps


def tree_nodes(drafts: Tensor, swaps: bool) -> tuple[Tensor, Tensor]:
    """drafts (B, N, L) the chain -> nodes (B, M, L) and their depth (M,): the chain (depths
    1..N), then with ``swaps`` each swap node of steps j, j+1 (j = 2..N-1, depth j)."""
    N = drafts.shape[1]
    depth = list(range(1, N + 1))
    nodes = [drafts]
    if swaps and N > 2:
        prev = drafts[:, : N - 2]  # D_{j-1}, j = 2..N-1 (D_1 .. D_{N-2})
        cur = drafts[:, 1 : N - 1]  # D_j
        nxt = drafts[:, 2:]  # D_{j+1}
        nodes.append(torch.where(cur != prev, prev, nxt))  # D_{j+1} with step j's commits undone
        depth += list(range(2, N))
    return torch.cat(nodes, 1), torch.tensor(depth, device=drafts.device)


@register_strategy("ssd")
@dataclass(kw_only=True, slots=True)
class SSD:
    num_drafts: int = 4  # N: drafted steps, the depth of the verification tree
    swaps: bool = True  # the swap nodes; False: the bare chain of drafted prefixes
    pending: TokenStats | None = field(default=None, repr=False)
    block_start: int = field(default=-1, repr=False)

    @property
    def candidate_rows(self) -> int:
        """Rows one canvas row occupies in a forward: the tree's nodes (dllm.engine.memory)."""
        return self.num_drafts + (max(0, self.num_drafts - 2) if self.swaps else 0)

    def __post_init__(self) -> None:
        if self.num_drafts < 1:
            raise ValueError(f"num_drafts must be >= 1, got {self.num_drafts}")

    def check_config(self, config) -> None:
        """Refuse what would make a candidate state differ from the base decode's state."""
        if config.stopper != "none":
            raise ValueError(f"ssd verifies the base rule's steps alone; stopper {config.stopper!r} commits "
                             "outside them: use stopper='none'")
        refuse_refreshes("ssd", config)

    def step(self, state) -> Tensor:
        """One round; returns the base-rule steps each row took (the walk's length)."""
        self.check_config(state.config)
        B = state.tokens.shape[0]
        self.pending = block_statistics(self, state)
        moving = state.moving_rows()  # (B,) rows with masks left; the others take no step
        chain = torch.stack(rule_steps(state, state.tokens, self.pending, self.num_drafts), 1)  # (B, N, L)
        nodes, depth = tree_nodes(chain, self.swaps)
        M = nodes.shape[1]
        block = slice(state.bs, state.be)
        flat = nodes.reshape(B * M, -1)
        # (B, M): the node leaves work (masks in the block, text not final): the walk may go on from it
        open_ = leaves_work(state, flat).reshape(B, M)
        unfinished = open_[:, 0]
        if not bool(unfinished.any()):  # the base step leaves no work in any row: no forward needed
            state.commit(chain[:, 0, block] != state.tokens[:, block], chain[:, 0, block])
            self.pending = None
            return moving.long()
        rows = torch.arange(B, device=flat.device).repeat_interleave(M)  # (B*M,)
        ahead = state.row_step[rows] + depth.repeat(B)  # a node of depth d sits d steps ahead
        stats = evaluate_candidates(state, flat, rows, count=unfinished, steps=ahead)  # fields (B*M, W)
        targets = rule_steps(state, flat, stats, 1, rows=rows, first_step=ahead)[0].reshape(B, M, -1)
        # moves[b, i, k]: node k is one verified base step from node i
        same = (targets[:, :, None, block] == nodes[:, None, :, block]).all(-1)  # (B, M, M)
        moves = same & (depth[None, :] == depth[:, None] + 1)[None] & open_[:, :, None]
        at = torch.zeros(B, dtype=torch.long, device=flat.device)  # chain node 1: the base step
        taken = torch.ones_like(at)
        going = torch.ones(B, dtype=torch.bool, device=flat.device)
        batch = torch.arange(B, device=flat.device)
        for _ in range(self.num_drafts - 1):
            options = moves[batch, at]  # (B, M)
            going = going & options.any(-1)
            at = torch.where(going, options.int().argmax(-1), at)
            taken += going.long()
        taken = torch.where(moving, taken, 0)
        pick = batch * M + at  # (B,) into flat
        chosen = flat[pick]  # (B, L)
        state.commit(chosen[:, block] != state.tokens[:, block], chosen[:, block])
        self.pending = stats.index(pick)
        return taken
