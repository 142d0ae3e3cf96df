"""Branch parallelism: LoPA's (or FreeDave's) candidate states spread over processes.

Every rank holds the model and runs the same deterministic strategy code, so every rank builds
the same candidates. ``BranchParallelEvaluator`` replaces the candidate evaluator: rank r
forwards its contiguous share of the candidates against its own copy of the cache, the
per-candidate statistics (5 small tensors per candidate, not the logits) are all-gathered, and
every rank applies the same winner decision. Candidate forwards never write the canvas cache
(they run on a row-selected copy), and the canvas' own refresh forwards run on every rank, so
the caches stay identical without broadcasting K/V.

Any candidate count works with any number of ranks: shares differ by at most one candidate
(a batch's short tail, or a row count the ranks do not divide), the gathered statistics are
padded to the largest share and trimmed after the gather. A rank with no candidate of its own
(fewer candidates than ranks) forwards a copy of the last one and discards it, so every rank
still spends one forward per round. Sampling noise is keyed by each candidate's row and step (not
by its rank or share) and NFE, draft rows and token-forwards are charged as one process would, so the
tokens and counters equal the single-process run.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from dllm.kernels import TokenStats
from dllm.samplers.strategies.candidates import set_candidate_evaluator


def shares(n: int, world: int) -> list[int]:
    """Candidates per rank: contiguous, sizes differing by at most one, larger shares first."""
    return [n // world + (r < n % world) for r in range(world)]


class BranchParallelEvaluator:
    """``rank`` of ``world_size`` copies of the model; ``group``: the torch.distributed group
    joining them (None: the whole world; under tensor parallelism the peer group, the ranks
    holding the same shard of each copy: ``dllm.parallel.groups``)."""

    def __init__(self, rank: int, world_size: int, group=None) -> None:
        self.rank, self.world, self.group = rank, world_size, group
        self.bytes_gathered = 0  # communication volume, for the benchmark
        self.rounds = 0

    def __call__(self, state, candidates: Tensor, rows: Tensor, count: Tensor | None = None,
                 steps: Tensor | None = None) -> TokenStats:
        N = candidates.shape[0]
        sizes = shares(N, self.world)
        start = sum(sizes[: self.rank])
        mine = slice(start, start + sizes[self.rank]) if sizes[self.rank] else slice(N - 1, N)
        runner = state.runner
        drafts_before, tokens_before = runner.draft_rows.clone(), runner.token_forwards.clone()
        logits = state.block_logits(candidates[mine], rows=rows[mine], count=count)
        # noise is keyed by each candidate's row and step, so a share draws what one process draws
        local = state.statistics(logits, rows=rows[mine], steps=None if steps is None else steps[mine],
                                 tokens=candidates[mine])
        if not sizes[self.rank]:
            local = local.index(slice(0, 0))
        # query tokens per candidate row, from whichever ranks forwarded a charged row
        spent = torch.stack([(runner.draft_rows - drafts_before).sum(), (runner.token_forwards - tokens_before).sum()])
        parts, spent_all = self._gather(local, spent, max(sizes))
        drafts, tokens = spent_all.sum(0)
        per_row = tokens // drafts.clamp_min(1)
        self._charge_like_one_process(runner, rows, count, drafts_before, tokens_before, per_row)
        self.rounds += 1
        return TokenStats(*(torch.cat([p[:n] for p, n in zip(field, sizes)]) for field in parts))

    def _gather(self, local: TokenStats, spent: Tensor, width: int) -> tuple[list[list[Tensor]], Tensor]:
        """All-gather every field padded to ``width`` rows; the spent counters ride with the tokens."""
        out = []
        for i, field in enumerate(local):
            padded = field.new_zeros((width, *field.shape[1:]))
            padded[: field.shape[0]] = field
            payload = torch.cat([padded.flatten(), spent.to(field.device)]) if i == 0 else padded
            parts = [torch.empty_like(payload) for _ in range(self.world)]
            dist.all_gather(parts, payload.contiguous(), group=self.group)
            self.bytes_gathered += payload.numel() * payload.element_size() * self.world
            if i == 0:
                spent_all = torch.stack([p[-2:] for p in parts])
                parts = [p[:-2].reshape(padded.shape) for p in parts]
            out.append(parts)
        return out, spent_all

    @staticmethod
    def _charge_like_one_process(runner, rows: Tensor, count: Tensor | None, drafts_before: Tensor,
                                 tokens_before: Tensor, per_row: Tensor) -> None:
        """Every rank reports the whole round's draft rows and token-forwards, as one process would
        (ModelRunner charges each canvas row once per candidate it has in the forward)."""
        charged = (runner.active if count is None else count & runner.active).long()
        width = torch.bincount(rows, minlength=runner.nfe.shape[0])
        runner.draft_rows.copy_(drafts_before + charged * width)
        runner.token_forwards.copy_(tokens_before + charged * width * per_row)


def enable_branch_parallel(rank: int, world_size: int, group=None) -> BranchParallelEvaluator | None:
    """Install the distributed evaluator; with one copy of the model nothing changes."""
    if world_size == 1:
        return None
    evaluator = BranchParallelEvaluator(rank, world_size, group)
    set_candidate_evaluator(evaluator)
    return evaluator
