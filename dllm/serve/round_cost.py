"""What a decode round costs, and whether rows should share one canvas or run as their own batch.

A batch's canvas is a rectangle: every row is left-padded to the longest prefix (prompt plus
finished blocks) and runs to the longest remaining answer, so rows at different stages waste
canvas tokens when they share a batch (a resumed row's long prefix pads a fresh row; a fresh
row's long answer pads a resumed one). A separate batch wastes nothing but pays one more
forward's fixed cost each round. ``RoundCost`` fits seconds = fixed + per_token x canvas tokens
from the rounds the scheduler times, and ``join_pays`` compares the two in canvas tokens: on a
GPU (large fixed cost per forward) rows share one batch; on a CPU (cost linear in tokens) rows
at different stages run side by side in batches of their own.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from dllm.engine.config import GenerationConfig

Shape = tuple[int, int]  # (prefix tokens: prompt + finished blocks, answer positions left)


def canvas_tokens(rows: list[Shape]) -> int:
    """Tokens of the canvas that holds ``rows`` (rows x (longest prefix + longest remainder))."""
    if not rows:
        return 0
    return len(rows) * (max(p for p, _ in rows) + max(r for _, r in rows))


def round_tokens(rows: list[Shape], config: GenerationConfig) -> float:
    """Tokens a round forwards for ``rows`` sharing a canvas, averaged over a block: the block's
    first round refreshes the whole canvas; later rounds forward the whole canvas again (no
    cache), the canvas from the block on (prefix: the longest remainder) or the window alone
    (dual)."""
    if not rows:
        return 0.0
    full = canvas_tokens(rows)
    if config.cache == "prefix":
        later = len(rows) * max(r for _, r in rows)
    elif config.cache == "dual":
        later = len(rows) * config.window_length
    else:
        later = full
    steps = config.steps_per_block
    return (full + (steps - 1) * later) / steps


def join_pays(batch: list[Shape], joining: list[Shape], overhead_tokens: float,
              tokens: Callable[[list[Shape]], float] = canvas_tokens) -> bool:
    """Whether ``joining`` rows cost less in ``batch``'s canvas than in a batch of their own,
    whose extra forward per round costs ``overhead_tokens`` (a forward's fixed cost in tokens);
    ``tokens`` prices a round of some rows (default: their canvas, as without a cache)."""
    if not batch or not joining:
        return True
    together = tokens(batch + joining)
    apart = tokens(batch) + tokens(joining) + overhead_tokens
    return together <= apart


@dataclass(kw_only=True)
class RoundCost:
    """Least-squares fit, weighted toward recent rounds, of a round's seconds against its tokens
    (``round_tokens``). ``overhead_tokens`` is a forward's fixed cost in tokens (fixed / per_token):
    ``fixed_tokens`` when given, else the fit once it has ``min_rounds`` rounds of spread sizes,
    else infinite (rows always share a batch, as when every forward costs the same)."""

    fixed_tokens: float | None = None
    decay: float = 0.99
    min_rounds: int = 64
    _n: float = 0.0
    _x: float = 0.0
    _y: float = 0.0
    _xx: float = 0.0
    _xy: float = 0.0
    _rounds: int = 0

    def observe(self, tokens: int, seconds: float) -> None:
        """Record one round over a canvas of ``tokens`` tokens that took ``seconds``."""
        d = self.decay
        self._n = d * self._n + 1
        self._x = d * self._x + tokens
        self._y = d * self._y + seconds
        self._xx = d * self._xx + tokens * tokens
        self._xy = d * self._xy + tokens * seconds
        self._rounds += 1

    @property
    def overhead_tokens(self) -> float:
        if self.fixed_tokens is not None:
            return self.fixed_tokens
        if self._rounds < self.min_rounds:
            return math.inf
        mean_x, mean_y = self._x / self._n, self._y / self._n
        var = self._xx / self._n - mean_x * mean_x
        if var <= (0.1 * mean_x) ** 2:  # sizes too alike to tell fixed from per-token cost
            return math.inf
        per_token = (self._xy / self._n - mean_x * mean_y) / var
        if per_token <= 0:  # time does not grow with tokens: every forward costs the same
            return math.inf
        return max(0.0, mean_y - per_token * mean_x) / per_token
