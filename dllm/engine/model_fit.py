"""A config checked against the model that will decode it, with no forward and no canvas.

``Decoding`` refuses, as it builds its first batch, what a model cannot run: mask-based options on
a uniform-state model and the uniform-state ones on a mask-based model, a block that is not the
model's canvas, a step budget that a block-causal model's windows cannot split, and a strategy
whose autoregressive helper was not loaded (its ``check_model``). A server queues a request long
before its batch is built, so it asks here first and answers a 400 instead of a failed batch.
"""
from __future__ import annotations

from dllm.engine.block_alignment import model_block_windows
from dllm.engine.config import GenerationConfig
from dllm.engine.uniform_state import uniform_state_config


def check_model_fit(model, config: GenerationConfig) -> GenerationConfig:
    """``config`` as ``model`` (a DiffusionTransformer) decodes it, or a ValueError naming the
    option to change. The config's own options are assumed checked (``check_policies``)."""
    from dllm.samplers import make_strategy

    config = uniform_state_config(model, model_block_windows(model, config))
    check_model = getattr(make_strategy(config.strategy, config.strategy_args), "check_model", None)
    if check_model is not None:
        check_model(model)
    return config
