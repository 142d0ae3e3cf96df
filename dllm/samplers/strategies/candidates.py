"""Evaluate many candidate states of the active block in one batched forward.

FreeDave's drafts and LoPA's branches go through ``evaluate_candidates``; branch parallelism
swaps the evaluator (``set_candidate_evaluator``) to spread candidates over processes without
touching the strategies.
"""
from __future__ import annotations

from typing import Callable

from torch import Tensor

from dllm.kernels import TokenStats

Evaluator = Callable[..., TokenStats]


def local_evaluator(state, candidates: Tensor, rows: Tensor, count: Tensor | None = None,
                    steps: Tensor | None = None) -> TokenStats:
    """candidates (N, L) canvases, rows (N,) their canvas row -> statistics with (N, W) fields.
    One forward, charged once to each canvas row in ``count`` (default: every active row);
    ``steps`` (N,): the window step of each candidate state, which keys its row's noise."""
    logits = state.block_logits(candidates, rows=rows, count=count)
    return state.statistics(logits, rows=rows, steps=steps, tokens=candidates)


_EVALUATOR: list[Evaluator] = [local_evaluator]


def set_candidate_evaluator(evaluator: Evaluator | None) -> None:
    """Install an evaluator (None restores the local one)."""
    _EVALUATOR[0] = evaluator or local_evaluator


def evaluate_candidates(state, candidates: Tensor, rows: Tensor, count: Tensor | None = None,
                        steps: Tensor | None = None) -> TokenStats:
    return _EVALUATOR[0](state, candidates, rows, count, steps)
