"""Sampling is batch invariant: every row draws from its own stream (its seed, its own step
count, the answer position), so at any temperature a ragged batch gives each row the tokens
of its single run, wherever the row sits in the batch, for every rule, strategy and cache."""
from __future__ import annotations

import pytest

from dllm import GenerationConfig
from dllm.engine.decoding import decode
from tests.rule_configs import RULE_OPTIONS, VARIANTS, rule_config, save_filter

PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13], [100, 3], [55, 66, 77, 88, 99]]
SAMPLING = {"T1": dict(temperature=1.0), "T0.7-top_p": dict(temperature=0.7, top_p=0.9)}


@pytest.fixture(scope="module")
def filter_dir(tmp_path_factory):
    return save_filter(tmp_path_factory.mktemp("filter"), 8)


def _cfg(**kw) -> GenerationConfig:
    return GenerationConfig(gen_length=16, block_length=8, steps=8, seed=7, **kw)


def _assert_rows_equal_single_runs(model, prompts, cfg, seeds=None) -> None:
    batch = decode(model, prompts, cfg, seeds=seeds)
    for row, prompt in enumerate(prompts):
        single = decode(model, [prompt], cfg, seeds=None if seeds is None else [seeds[row]])
        assert batch.answer[row].tolist() == single.answer[0].tolist(), f"row {row}"
        assert int(batch.nfe[row]) == int(single.nfe[0]), f"row {row}"


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("rule", sorted(RULE_OPTIONS) + sorted(VARIANTS))
@pytest.mark.parametrize("sampling", list(SAMPLING))
def test_every_rule_batch_equals_single_when_sampling(tiny_models, filter_dir, family, rule, sampling):
    cfg = _cfg(**rule_config(rule, filter_dir), **SAMPLING[sampling])
    _assert_rows_equal_single_runs(tiny_models[family].model, PROMPTS, cfg)


@pytest.mark.parametrize("rule", ["random", "origin"])
def test_drawing_rules_batch_equals_single_at_temperature_zero(tiny_models, filter_dir, rule):
    _assert_rows_equal_single_runs(tiny_models["dream"].model, PROMPTS, _cfg(**rule_config(rule, filter_dir)))


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("rule", ["low_confidence", "random", "threshold"])
def test_a_row_keeps_its_tokens_at_any_batch_position(tiny_models, filter_dir, family, rule):
    model = tiny_models[family].model
    cfg = _cfg(temperature=1.0, **rule_config(rule, filter_dir))
    order = [2, 0, 3, 1]
    first = decode(model, PROMPTS, cfg).answer.tolist()
    moved = decode(model, [PROMPTS[i] for i in order], cfg).answer.tolist()
    assert moved == [first[i] for i in order]
    assert decode(model, PROMPTS[1:3], cfg).answer.tolist() == first[1:3]  # another batch size


@pytest.mark.parametrize("cache", [dict(cache="prefix"), dict(cache="dual"), dict(cache="dual", sub_block_length=4)],
                         ids=lambda c: "+".join(f"{k}={v}" for k, v in c.items()))
def test_sampling_batch_equals_single_with_caches(tiny_models, cache):
    cfg = _cfg(temperature=1.0, policy="threshold", policy_args={"tau": 0.09}, **cache)
    _assert_rows_equal_single_runs(tiny_models["dream"].model, PROMPTS, cfg)


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("strategy", [dict(strategy="freedave", strategy_args={"num_drafts": 4}),
                                      dict(strategy="lopa", strategy_args={"branches": 2})],
                         ids=lambda s: s["strategy"])
def test_candidate_states_use_their_rows_stream(tiny_models, family, strategy):
    cfg = _cfg(temperature=1.0, policy="threshold", policy_args={"tau": 0.3}, **strategy)
    _assert_rows_equal_single_runs(tiny_models[family].model, PROMPTS, cfg)


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("rule", ["low_confidence", "random", "threshold"])
def test_freedave_is_lossless_when_sampling(tiny_models, filter_dir, family, rule):
    """A draft k steps ahead draws the noise the base decode draws k steps later."""
    model = tiny_models[family].model
    cfg = dict(**rule_config(rule, filter_dir), temperature=1.0, gen_length=16, block_length=8, steps=16)
    base = decode(model, PROMPTS, GenerationConfig(**cfg))
    fast = decode(model, PROMPTS, GenerationConfig(**cfg, strategy="freedave", strategy_args={"num_drafts": 8}))
    assert fast.answer.tolist() == base.answer.tolist()


def test_per_row_seeds(tiny_models):
    model = tiny_models["llada"].model
    cfg = _cfg(temperature=1.0, stop_at_eos=False)
    seeds = [3, 2**40 + 1, 3, 11]
    _assert_rows_equal_single_runs(model, PROMPTS, cfg, seeds=seeds)
    default = decode(model, PROMPTS, cfg).answer.tolist()
    assert decode(model, PROMPTS, cfg, seeds=[cfg.seed] * len(PROMPTS)).answer.tolist() == default
    samples = decode(model, [PROMPTS[0]] * 3, cfg, seeds=[1, 2, 3]).answer.tolist()  # n samples of a prompt
    assert len({tuple(s) for s in samples}) > 1


@pytest.mark.parametrize("seeds,match", [([1, 2], "2 seeds for 4 prompts"), ([1, 2, 3, 1.5], "seed 3 is 1.5")])
def test_bad_seeds_are_refused_before_model_work(seeds, match):
    class NoModel:  # any model work would fail with another error
        config = type("C", (), {"max_sequence_length": 64})()

    with pytest.raises(ValueError, match=match):
        decode(NoModel(), PROMPTS, _cfg(temperature=1.0), seeds=seeds)
