"""The decode config a uniform-state model runs (DiffusionGemma), or the reason it cannot.

A uniform-state model has no mask token: it decodes with ``strategy="uniform"``,
``cache="encoder"`` and the entropy-bound acceptance ``policy="eb_sampler"`` over every canvas
position (the defaults ``plain`` / ``none`` / ``low_confidence`` become them), canvases of the
model's ``canvas_length``, and its own temperatures and stop (the strategy's options).
What works on masks is refused with the reason, before any forward; so are the uniform-state
strategy and cache on a mask-based model.
"""
from __future__ import annotations

import dataclasses

from dllm.cache import CACHES
from dllm.engine.config import GenerationConfig
from dllm.samplers.base import RULES, STOPPERS, STRATEGIES
from dllm.validation import did_you_mean

STRATEGY, CACHE, RULE = "uniform", "encoder", "eb_sampler"


def uniform_state_config(model, config: GenerationConfig) -> GenerationConfig:
    """``config`` as ``model`` decodes it (unchanged for mask-based models)."""
    if not getattr(model, "uniform_state", False):
        if config.strategy == STRATEGY or config.cache == CACHE:
            raise ValueError(f"strategy {STRATEGY!r} and cache {CACHE!r} decode uniform-state models (DiffusionGemma); "
                             "this model is mask-based: use another strategy and cache")
        return config
    names = (("policy", config.policy, RULES), ("strategy", config.strategy, STRATEGIES),
             ("stopper", config.stopper, STOPPERS), ("cache", config.cache, CACHES))
    for kind, name, table in names:  # a misspelt name is that, not a mask-based option
        if name not in table:
            raise ValueError(f"unknown {kind} {name!r}{did_you_mean(str(name), table)}; known: {sorted(table)}")
    default_rule = config.policy == "low_confidence" and not config.policy_args
    config = dataclasses.replace(config, strategy=STRATEGY if config.strategy == "plain" else config.strategy,
                                 cache=CACHE if config.cache == "none" else config.cache,
                                 policy=RULE if default_rule else config.policy)
    why = "mask-based, it does not apply to uniform-state decoding (no mask token)"
    refused = [
        (config.strategy != STRATEGY, f"strategy {config.strategy!r}: {why}; use strategy {STRATEGY!r}"),
        (config.cache != CACHE, f"cache {config.cache!r}: {why}; use cache {CACHE!r}"),
        (config.policy != RULE, f"policy {config.policy!r}: {why}; acceptance is policy {RULE!r} (policy_args "
                                "gamma: the entropy bound)"),
        (config.stopper != "none", f"stopper {config.stopper!r}: {why}; the stop is strategy_args' "
                                   "stability_threshold / confidence_threshold"),
        (config.temperature > 0 or config.top_k is not None or config.top_p is not None,
         "temperature / top_k / top_p: the temperatures are strategy_args' t_min / t_max"),
        (config.cfg_scale > 0, "cfg_scale: classifier-free guidance masks the prompt, and this model has no mask"),
        (config.sub_block_length is not None, "sub_block_length: a canvas is denoised whole"),
        (config.block_add_threshold is not None, "the pipelined mode (block_add_threshold): canvases follow "
                                                 "one another"),
    ]
    for bad, what in refused:
        if bad:
            raise ValueError(f"{model.config.family}: {what}")
    canvas = model.config.canvas_length
    if config.block_length != canvas:
        raise ValueError(f"{model.config.family} denoises canvases of {canvas} tokens (canvas_length): set "
                         f"block_length={canvas} and gen_length a multiple of it, got "
                         f"gen_length={config.gen_length}, block_length={config.block_length}")
    return config
