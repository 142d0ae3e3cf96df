"""Unmasking rules, decoding strategies and stopping criteria, each registered by name.

One folder per kind of policy: ``rules/``, ``strategies/``, ``stoppers/``. A new one is a file
in its folder plus its import in that folder's ``__init__``; ``base.py`` holds the registries.
"""
from dllm.samplers import rules, stoppers, strategies  # noqa: F401  (registers)
from dllm.samplers.base import (
    RULES, STOPPERS, STRATEGIES, RuleInput, make_rule, make_stopper, make_strategy, topk_mask,
)

__all__ = [
    "RULES", "STOPPERS", "STRATEGIES", "RuleInput", "make_rule", "make_stopper",
    "make_strategy", "topk_mask",
]
