"""GenerationConfig's bounds at their edges: the last value inside is taken, the first outside is
refused with an error naming the field (not a later field the bad value breaks)."""
from __future__ import annotations

import pytest

from dllm.engine.config import GenerationConfig


def test_a_seed_is_below_2_to_the_63():
    assert GenerationConfig(seed=2**63 - 1).seed == 2**63 - 1
    with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*63\)"):
        GenerationConfig(seed=2**63)


def test_a_zero_gen_length_is_refused_as_gen_length():
    assert GenerationConfig(gen_length=1).block_length == 1
    with pytest.raises(ValueError, match="gen_length must be positive, got 0"):
        GenerationConfig(gen_length=0)


@pytest.mark.parametrize("inside, outside, message", [
    (dict(temperature=0.0), dict(temperature=-0.5), "temperature must be >= 0"),
    (dict(top_p=1.0), dict(top_p=0.0), r"top_p must be in \(0, 1\]"),
    (dict(top_p=1e-6), dict(top_p=1.5), r"top_p must be in \(0, 1\]"),
    (dict(top_k=1), dict(top_k=0), "top_k must be positive"),
    (dict(memory_budget_mb=1e-3), dict(memory_budget_mb=0.0), "memory_budget_mb must be positive"),
    (dict(edit_threshold=0.0), dict(edit_threshold=1.0), r"edit_threshold must be in \[0, 1\)"),
    (dict(max_post_steps=0), dict(max_post_steps=-1), "max_post_steps must be >= 0"),
    (dict(decoded_token_threshold=1.0), dict(decoded_token_threshold=1.5), r"decoded_token_threshold must .* \[0, 1\]"),
    (dict(decoded_token_threshold=0.0), dict(decoded_token_threshold=-0.5), r"decoded_token_threshold must .* \[0, 1\]"),
    (dict(block_add_threshold=1.0), dict(block_add_threshold=1.5), r"block_add_threshold must .* \[0, 1\]"),
    (dict(block_add_threshold=0.0), dict(block_add_threshold=-0.5), r"block_add_threshold must .* \[0, 1\]"),
    (dict(cfg_scale=0.0), dict(cfg_scale=-1.0), "cfg_scale must be >= 0"),
    (dict(sub_block_length=4, block_length=8, gen_length=16), dict(sub_block_length=0), "sub_block_length=0 must divide"),
    (dict(sub_block_length=4, block_length=8, gen_length=16), dict(sub_block_length=4, block_length=6, gen_length=12),
     "sub_block_length=4 must divide block_length=6"),
    (dict(gen_length=16, block_length=8, steps=2), dict(gen_length=16, block_length=8, steps=3), "multiple of the number of blocks"),
    (dict(gen_length=16, block_length=8, sub_block_length=4, steps=4),
     dict(gen_length=16, block_length=8, sub_block_length=4, steps=6), "multiple of the number of sub-blocks"),
])
def test_each_bound_takes_its_last_value_and_refuses_the_next(inside, outside, message):
    GenerationConfig(**inside)
    with pytest.raises(ValueError, match=message):
        GenerationConfig(**outside)


@pytest.mark.parametrize("options, message", [
    (dict(edit_threshold=0.5, strategy="lopa"), "token editing .* runs with strategy 'plain'"),
    (dict(block_add_threshold=0.5, sub_block_length=4, block_length=8, gen_length=16), "does not run with sub_block_length"),
    (dict(block_add_threshold=0.5, edit_threshold=0.5), "does not run with token editing"),
    (dict(block_add_threshold=0.5, strategy="freedave"), "does not run with strategy 'freedave'"),
    (dict(cuda_graphs=True, compile=True), "pick one"),
    (dict(cuda_graphs=True, cache="adaptive"), "no forward to replay"),
])
def test_options_that_do_not_run_together_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        GenerationConfig(**options)


def test_lopa_runs_pipelined():
    assert GenerationConfig(block_add_threshold=0.5, strategy="lopa").strategy == "lopa"


def test_the_window_is_the_sub_block_and_the_cache_is_told_both():
    config = GenerationConfig(gen_length=16, block_length=8, sub_block_length=4, steps=8, cache="dual",
                              cache_args={"block_length": 2, "select": "read"})
    assert (config.window_length, config.num_windows, config.steps_per_block) == (4, 4, 2)
    assert config.cache_options() == {"select": "read", "block_length": 8, "sub_block_length": 4}
    assert GenerationConfig(gen_length=16, block_length=8).cache_options() == {"block_length": 8}
