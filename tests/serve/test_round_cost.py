"""The scheduler's cost model: rows at different stages pad each other's canvas, and a batch of
their own costs one more forward per round; the fit recovers a round's fixed and per-token cost."""
from __future__ import annotations

import math
import random

import functools

from dllm import GenerationConfig
from dllm.serve.round_cost import RoundCost, canvas_tokens, join_pays, round_tokens


def test_canvas_tokens_pad_to_the_longest_prefix_and_remainder():
    assert canvas_tokens([]) == 0
    assert canvas_tokens([(30, 8), (10, 32)]) == 2 * (30 + 32)


def test_rows_at_the_same_stage_share_a_batch_rows_far_apart_do_not():
    running = [(60, 8), (58, 8), (62, 8)]  # prompts with three finished blocks, one block left
    fresh = [(30, 32)]
    waste = canvas_tokens(running + fresh) - canvas_tokens(running) - canvas_tokens(fresh)
    assert waste > 0
    assert not join_pays(running, fresh, overhead_tokens=waste - 1)  # a forward of their own is cheaper
    assert join_pays(running, fresh, overhead_tokens=waste)
    assert join_pays(running, fresh, overhead_tokens=math.inf)  # every forward costs the same: always share
    assert join_pays(running, [(62, 8)], overhead_tokens=0)  # fits the canvas: no padding, nothing to save
    assert join_pays([], fresh, overhead_tokens=0)


def test_a_round_is_priced_by_what_its_cache_forwards():
    rows = [(60, 8), (30, 32)]  # canvas 2 x (60 + 32); one block of 8 rounds
    config = dict(gen_length=32, block_length=8)
    none = round_tokens(rows, GenerationConfig(**config, cache="none"))
    prefix = round_tokens(rows, GenerationConfig(**config, cache="prefix"))
    dual = round_tokens(rows, GenerationConfig(**config, cache="dual"))
    assert none == canvas_tokens(rows) == 184
    assert prefix == (184 + 7 * 2 * 32) / 8  # a refresh, then the canvas from the block on
    assert dual == (184 + 7 * 2 * 8) / 8  # a refresh, then the block alone
    # the decision follows the cache: most prefix rounds forward only the remainders, so the same
    # rows pad each other by fewer tokens (76 a round) than their canvas says (104)
    resumed, fresh = [(60, 8), (58, 8), (62, 8)], [(30, 32)]
    price = functools.partial(round_tokens, config=GenerationConfig(**config, cache="prefix"))
    assert not join_pays(resumed, fresh, 90) and join_pays(resumed, fresh, 90, price)


def test_fit_recovers_fixed_and_per_token_cost():
    rng = random.Random(0)
    cost = RoundCost(min_rounds=32)
    for _ in range(31):
        tokens = rng.randrange(50, 800)
        cost.observe(tokens, 0.006 + 0.0001 * tokens)
    assert cost.overhead_tokens == math.inf  # too few rounds: share (the behaviour without a fit)
    for _ in range(200):
        tokens = rng.randrange(50, 800)
        cost.observe(tokens, (0.006 + 0.0001 * tokens) * rng.uniform(0.97, 1.03))
    assert 40 < cost.overhead_tokens < 80  # 0.006 s / 0.0001 s per token = 60 tokens


def test_no_spread_or_flat_cost_means_share():
    same = RoundCost(min_rounds=4)
    for _ in range(50):
        same.observe(400, 0.02)
    assert same.overhead_tokens == math.inf
    flat = RoundCost(min_rounds=4)
    for tokens in range(100, 1000, 10):
        flat.observe(tokens, 0.02)
    assert flat.overhead_tokens == math.inf
    assert RoundCost(fixed_tokens=25.0).overhead_tokens == 25.0
