"""What an unmasking rule sees and returns, top-k selection, and the rule registry.

A rule is a pure function of (state, statistics) -> commit mask over the active window, so
strategies (FreeDave, LoPA) can apply it to candidate states. Statistics arrive precomputed
from one kernel call per forward (argmax token, probability, margins, entropy).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Protocol

import torch
from torch import Tensor

from dllm.kernels import TokenStats
from dllm.samplers.noise import RowNoise
from dllm.validation import OptionTypeError, check_fields, did_you_mean


@dataclass(kw_only=True, slots=True)
class RuleInput:
    """The active window of every row at one step. All tensors are (B, W) unless noted."""

    stats: TokenStats
    eligible: Tensor  # bool: still masked and inside the active block
    step: int | Tensor  # base-rule steps each row already took in this block, (B,) or shared
    num_steps: int  # the block's step budget (schedules divide the block's masks over it)
    block_masks: Tensor  # (B,) masks in the block when the block started
    # each row's own random stream, built only when a rule draws (most rules never do)
    noise: Callable[[], RowNoise] | None = None

    def uniform(self, draw: int = 0) -> Tensor:
        """(B, W) uniforms in (0, 1) from each row's own stream at this step."""
        if self.noise is None:
            raise ValueError("this rule draws random numbers: build its RuleInput with noise= "
                             "(DecodeState.rule_input does)")
        return self.noise().uniform(draw)


class UnmaskingRule(Protocol):
    """A rule (or stopper) whose class sets ``reads_eligible_only = True`` promises to read the
    statistics of eligible positions only; the plain strategy then lets the LM head skip the
    others (their statistics are then those of zero logits)."""

    def __call__(self, inp: RuleInput) -> Tensor:
        """Return a bool (B, W) mask of positions to commit, a subset of ``inp.eligible``."""


def topk_mask(scores: Tensor, k: Tensor, eligible: Tensor) -> Tensor:
    """Per-row top-k of ``scores`` among eligible positions; k is (B,) and may differ per row.

    Ties go to the lower index (stable sort), so a row's choice never depends on its batch.
    """
    scores = scores.masked_fill(~eligible, float("-inf"))
    order = scores.argsort(dim=-1, descending=True, stable=True)  # (B, W)
    # each position's place in that order (the inverse permutation; its values are distinct, and
    # the stable sort is the faster one on a CPU)
    ranks = order.argsort(dim=-1, stable=True)
    return (ranks < k[:, None]) & eligible


def _registry(kind: str):
    table: dict[str, type] = {}

    def register(name: str) -> Callable[[type], type]:
        def wrap(cls: type) -> type:
            table[name] = cls
            return cls

        return wrap

    def make(name: str, options: dict | None = None):
        if name not in table:
            raise ValueError(f"unknown {kind} {name!r}{did_you_mean(str(name), table)}; known: {sorted(table)}")
        cls = table[name]
        if options is not None and not isinstance(options, dict):
            raise OptionTypeError(f"options of {kind} {name!r} must be a dict of name -> value, "
                                  f"got {type(options).__name__}")
        options = dict(options or {})
        known = {f.name for f in dataclasses.fields(cls) if f.init} if dataclasses.is_dataclass(cls) else set()
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"{kind} {name!r} has no option(s) {unknown}{did_you_mean(str(unknown[0]), known)}; "
                             f"its options: {sorted(known)}")
        if dataclasses.is_dataclass(cls):  # e.g. tau="high": name the option, not a '<=' deep inside
            options = check_fields(cls, options, f"{kind} {name!r}")
        return cls(**options)

    return table, register, make


# Strategies: ``step(state)`` spends forwards and commits (plain, FreeDave, LoPA); it returns the
# base-rule steps each row took, (B,), or None for one step per row that had masks.
STRATEGIES, register_strategy, make_strategy = _registry("decoding strategy")
# Stoppers: ``__call__(state, stats, commit) -> commit``; may commit more to end early.
STOPPERS, register_stopper, make_stopper = _registry("stopping criterion")


@register_stopper("none")
@dataclass(kw_only=True, slots=True)
class NoStopper:
    reads_eligible_only = True  # reads nothing

    def __call__(self, state, stats: TokenStats, commit: Tensor) -> Tensor:
        return commit


# Unmasking rules: ``__call__(RuleInput) -> commit mask``.
RULES, register_rule, make_rule = _registry("unmasking rule")
