"""Unmasking rules, decoding strategies and stopping criteria, each registered by name.

A new rule is one file here plus its import below.
"""
from dllm.samplers import (  # noqa: F401  (registers)
    dream_topk, eb_sampler, entropy_threshold, eotp, factor, freedave, learn2pd, llada_topk, lopa,
    plain, prophet, sched, threshold,
)
from dllm.samplers.base import (
    RULES, STOPPERS, STRATEGIES, RuleInput, make_rule, make_stopper, make_strategy, topk_mask,
)

__all__ = [
    "RULES", "STOPPERS", "STRATEGIES", "RuleInput", "make_rule", "make_stopper",
    "make_strategy", "topk_mask",
]
