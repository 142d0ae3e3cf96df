"""Cache modes: objects that produce the active block's logits for the engine.

Every mode answers one question, ``block_logits(runner, tokens, bs, be, step)``: the logits
(aligned to positions, logit shift applied) of canvas positions [bs, be) for the given tokens.
``step`` is the number of forwards already spent on this block (0 = block start, where cached
modes refresh). ``rows`` / ``count`` pass through to ModelRunner for candidate-state batches.
Rules never see the cache.
"""
from __future__ import annotations

from typing import Callable, Protocol

from torch import Tensor

from dllm.runner.model_runner import ModelRunner
from dllm.validation import did_you_mean


class CacheMode(Protocol):
    def block_logits(self, runner: ModelRunner, tokens: Tensor, bs: int, be: int, step: int,
                     rows: Tensor | None = None, count: Tensor | None = None) -> Tensor: ...


CACHES: dict[str, Callable[..., CacheMode]] = {}
# the options a user may set per mode (cache_args); None: a mode that did not declare them (a
# bench's or a user's own), whose factory takes what it takes, as before modes declared them
CACHE_ARGS: dict[str, tuple[str, ...] | None] = {}
ENGINE_OPTIONS = ("block_length", "sub_block_length")  # what the engine passes every mode itself


def register_cache(name: str, cache_args: tuple[str, ...] | None = None):
    """Register ``factory`` as cache mode ``name``; ``cache_args`` are the options it takes from a
    user (() for none), checked by name before the factory is called; None leaves them to it."""
    def wrap(factory):
        CACHES[name] = factory
        CACHE_ARGS[name] = None if cache_args is None else tuple(cache_args)
        return factory

    return wrap


def make_cache(name: str, **options) -> CacheMode:
    if name not in CACHES:
        raise ValueError(f"unknown cache {name!r}{did_you_mean(str(name), CACHES)}; known caches: {sorted(CACHES)}")
    declared = CACHE_ARGS[name]
    unknown = [] if declared is None else sorted(set(options) - set(declared) - set(ENGINE_OPTIONS))
    if unknown:  # named before the mode's own TypeError, with the options it does take
        known = sorted(declared)
        raise ValueError(f"cache {name!r} has no option(s) {unknown}{did_you_mean(unknown[0], known)}; "
                         f"its cache_args: {known}")
    try:
        return CACHES[name](**options)
    except TypeError as err:  # an option the mode does not take
        raise ValueError(f"cache {name!r}: {err}; check cache_args") from err
