"""Branch parallelism: LoPA's (or FreeDave's) candidate states spread over processes.

Every rank holds the model and runs the same deterministic strategy code, so every rank builds
the same candidates. ``BranchParallelEvaluator`` replaces the candidate evaluator: rank r
forwards its contiguous share of the candidates against its own copy of the cache, the
per-candidate statistics (5 small tensors per candidate, not the logits) are all-gathered, and
every rank applies the same winner decision. Candidate forwards never write the canvas cache
(they run on a row-selected copy), and the canvas' own refresh forwards run on every rank, so
the caches stay identical without broadcasting K/V.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from dllm.kernels import TokenStats
from dllm.samplers.strategies.candidates import set_candidate_evaluator


class BranchParallelEvaluator:
    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world = rank, world_size
        self.bytes_gathered = 0  # communication volume, for the benchmark
        self.rounds = 0

    def __call__(self, state, candidates: Tensor, rows: Tensor, count: Tensor | None = None,
                 steps: Tensor | None = None) -> TokenStats:
        N = candidates.shape[0]
        if N % self.world:
            raise ValueError(f"{N} candidates cannot be split over {self.world} ranks; choose a branch count "
                             f"with (branches + 1) * batch divisible by the number of processes")
        share = N // self.world
        mine = slice(self.rank * share, (self.rank + 1) * share)
        before = state.runner.token_forwards.clone()
        logits = state.block_logits(candidates[mine], rows=rows[mine], count=count)
        local = state.statistics(logits, rows=rows[mine], steps=None if steps is None else steps[mine])
        self._charge_other_ranks(state, rows, rows[mine], state.runner.token_forwards - before, count)
        gathered = [self._gather(field) for field in local]
        self.rounds += 1
        return TokenStats(*gathered)

    def _gather(self, t: Tensor) -> Tensor:
        parts = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(parts, t.contiguous())
        self.bytes_gathered += t.numel() * t.element_size() * self.world
        return torch.cat(parts)

    @staticmethod
    def _charge_other_ranks(state, rows: Tensor, my_rows: Tensor, my_tokens: Tensor, count: Tensor | None) -> None:
        """Every rank reports the whole round's draft rows and token-forwards, as one process would."""
        runner = state.runner
        charged = runner.active if count is None else count & runner.active
        B = runner.nfe.shape[0]
        mine = torch.bincount(my_rows, minlength=B)
        others = torch.bincount(rows, minlength=B) - mine
        per_candidate = (my_tokens // mine.clamp_min(1)).max()  # query tokens of one candidate forward
        runner.draft_rows += charged.long() * others
        runner.token_forwards += charged.long() * others * per_candidate


def enable_branch_parallel(rank: int, world_size: int) -> BranchParallelEvaluator | None:
    """Install the distributed evaluator; with one process nothing changes."""
    if world_size == 1:
        return None
    evaluator = BranchParallelEvaluator(rank, world_size)
    set_candidate_evaluator(evaluator)
    return evaluator
