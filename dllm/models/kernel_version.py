"""The version of a model's kernels: a count that every in-place swap of its modules raises.

A CUDA graph replays the kernels it captured, not the modules the model holds now, so graphs
captured before a swap (``make_batch_invariant``) would replay the old kernels. The graph runner
(``dllm.runner.graphs``) sits above the models and the models cannot reach it, so the model
carries the count: the runner records it with its graphs and drops them when it has moved.
A swap made while the model is built (prepacking, quantizing at load) needs none: nothing has
captured the model yet.
"""
from __future__ import annotations

from torch import nn

ATTRIBUTE = "kernel_version"


def kernel_version(model: nn.Module) -> int:
    """How many times the model's modules were swapped in place since it was built (0: never)."""
    return getattr(model, ATTRIBUTE, 0)


def modules_swapped(model: nn.Module) -> int:
    """Record a swap of the model's modules (call it after the swap); returns the new version."""
    version = kernel_version(model) + 1
    setattr(model, ATTRIBUTE, version)
    return version


__all__ = ["kernel_version", "modules_swapped"]
