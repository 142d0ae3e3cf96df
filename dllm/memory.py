"""Memory plan of one decode: weights, KV-cache buffers and logits, checked against a budget.

The plan is computed from shapes before any model work, so a canvas that does not fit a stated
budget (``GenerationConfig.memory_budget_mb``) is refused with an error that names the fix
instead of crashing out of memory half-way. Cache modes report the bytes they really allocated
(``peak_bytes``), which the engine returns next to the plan.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from dllm.cache.kv import KVBuffers
from dllm.config import GenerationConfig
from dllm.samplers import make_strategy

MIB = 1 << 20


class MemoryBudgetError(ValueError):
    """The requested canvas does not fit ``memory_budget_mb``."""


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    model_bytes: int  # parameters and buffers of the model
    kv_cache_bytes: int  # the cache's K/V buffers, candidate copies included (0 without a cache)
    logits_bytes: int  # float32 logits of the widest forward

    @property
    def total_bytes(self) -> int:
        return self.model_bytes + self.kv_cache_bytes + self.logits_bytes

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "total_bytes": self.total_bytes}


def model_bytes(model: torch.nn.Module) -> int:
    tensors = list(model.parameters()) + list(model.buffers())
    return sum(t.numel() * t.element_size() for t in tensors)


def kv_cache_bytes(model, batch: int, length: int) -> int:
    """Bytes of the K and V buffers of every layer for ``batch`` rows of ``length`` positions."""
    itemsize = torch.empty((), dtype=model.dtype).element_size()
    return 2 * model.config.n_layers * math.prod(KVBuffers.shape(model, batch, length)) * itemsize


def plan_memory(model, batch: int, canvas_length: int, config: GenerationConfig, strategy=None) -> MemoryPlan:
    """Upper-bound plan: the base cache plus one candidate copy of it, and float32 logits of a
    whole-canvas forward for every candidate row (the strategy's ``candidate_rows``; CFG doubles
    the rows). ``strategy`` defaults to the one ``config`` names."""
    strategy = strategy or make_strategy(config.strategy, config.strategy_args)
    rows = batch * strategy.candidate_rows * (2 if config.cfg_scale > 0 else 1)
    kv = 0
    if config.cache != "none":
        kv = kv_cache_bytes(model, batch, canvas_length)
        if rows > batch:
            kv += kv_cache_bytes(model, rows, canvas_length)
    logits = rows * canvas_length * model.config.vocab_size * 4
    return MemoryPlan(model_bytes=model_bytes(model), kv_cache_bytes=kv, logits_bytes=logits)


def check_memory_budget(plan: MemoryPlan, config: GenerationConfig, batch: int, canvas_length: int) -> None:
    budget = config.memory_budget_mb
    if budget is None or plan.total_bytes <= budget * MIB:
        return
    raise MemoryBudgetError(
        f"a canvas of {batch} rows x {canvas_length} positions needs {plan.total_bytes / MIB:.1f} MiB "
        f"(model {plan.model_bytes / MIB:.1f}, KV cache {plan.kv_cache_bytes / MIB:.1f}, "
        f"logits {plan.logits_bytes / MIB:.1f}) but memory_budget_mb is {budget:g}; use a smaller "
        "batch or gen_length, fewer drafts / branches, or raise memory_budget_mb")
