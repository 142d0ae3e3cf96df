"""FreeDave is lossless with respect to its base rule; LoPA composes and keeps batch == single."""
from __future__ import annotations

import pytest

from dllm import GenerationConfig
from dllm.engine.decoding import decode

PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13], [100, 3], [55, 66, 77, 88, 99]]
# adaptive, select="window" with ratio 1: each step recomputes the whole scope from the
# block-start inputs, so a draft evaluated on the block-start cache sees what the plain decode
# would (FreeDave lossless)
CACHES = [dict(cache="none"), dict(cache="prefix"), dict(cache="dual"),
          dict(cache="adaptive", cache_args={"select": "window", "ratio": 1.0})]


def _cfg(**kw):
    return GenerationConfig(gen_length=16, block_length=8, steps=16, stop_at_eos=False, **kw)


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("cache", CACHES, ids=lambda c: c["cache"])
@pytest.mark.parametrize("K", [2, 4, 8])
@pytest.mark.parametrize("prompts", [PROMPTS[:1], PROMPTS], ids=["batch1", "batch4"])
def test_freedave_equals_static_decoding(tiny_models, family, cache, K, prompts):
    model = tiny_models[family].model
    base = decode(model, prompts, _cfg(**cache))
    fast = decode(model, prompts, _cfg(strategy="freedave", strategy_args={"num_drafts": K}, **cache))
    assert fast.answer.tolist() == base.answer.tolist()
    # the base rule takes one step per token; a round that accepts a draft does two or more in
    # one forward: every row accepted some (measured: 1 to 8 of 16 steps saved per row)
    assert (fast.nfe < base.nfe).all(), (base.nfe.tolist(), fast.nfe.tolist())
    assert (fast.draft_rows >= fast.nfe).all()


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_freedave_plus_plus_equals_threshold_decoding(tiny_models, family):
    model = tiny_models[family].model
    kw = dict(policy="threshold", policy_args={"tau": 0.3})
    base = decode(model, PROMPTS, _cfg(**kw))
    fast = decode(model, PROMPTS, _cfg(strategy="freedave", strategy_args={"num_drafts": 4}, **kw))
    assert fast.answer.tolist() == base.answer.tolist()


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("cache", CACHES + [dict(cache="adaptive")], ids=lambda c: c["cache"] + str(c.get("cache_args", "")))
@pytest.mark.parametrize("branches", [1, 3])
def test_lopa_batch_equals_single(tiny_models, family, cache, branches):
    model = tiny_models[family].model
    cfg = _cfg(policy="threshold", policy_args={"tau": 0.5}, strategy="lopa",
               strategy_args={"branches": branches}, **cache)
    batch = decode(model, PROMPTS, cfg)
    for row, prompt in enumerate(PROMPTS):
        single = decode(model, [prompt], cfg)
        assert batch.answer[row].tolist() == single.answer[0].tolist()
        assert int(batch.nfe[row]) == int(single.nfe[0])
    assert (batch.draft_rows >= batch.nfe).all()


def test_lopa_without_branches_is_its_rule(tiny_models):
    """k = 0 branches: the anchor alone, i.e. the wrapped rule's own trajectory."""
    model = tiny_models["llada"].model
    kw = dict(policy="threshold", policy_args={"tau": 0.5})
    base = decode(model, PROMPTS, _cfg(**kw))
    lopa = decode(model, PROMPTS, _cfg(strategy="lopa", strategy_args={"branches": 0}, **kw))
    assert lopa.answer.tolist() == base.answer.tolist()


@pytest.mark.parametrize("family, cache", [
    ("dream", dict(cache="dual", cache_args={"refresh_every": 2})),
    ("dream", dict(cache="adaptive", cache_args={"prompt_every": 4})),
    ("llada", dict(cache="adaptive", cache_args={"select": "window", "ratio": 0.5, "from_layer": 0})),
], ids=["refresh_every", "prompt_every", "window_ratio"])
def test_freedave_refuses_refreshes_that_would_not_be_lossless(tiny_models, monkeypatch, family, cache):
    """Refused before any forward, and why: drafts are evaluated on the block start's K/V, which
    the base decode's refreshes change (with the check bypassed the answers differ)."""
    from dllm.samplers.strategies.freedave import FreeDave

    model = tiny_models[family].model
    cfg = dict(gen_length=32, block_length=32, steps=32, stop_at_eos=False, **cache)
    fast = GenerationConfig(**cfg, strategy="freedave", strategy_args={"num_drafts": 4})
    with pytest.raises(ValueError, match="freedave is lossless only when a forward depends on the block start"):
        decode(model, PROMPTS, fast)
    base = decode(model, PROMPTS, GenerationConfig(**cfg))
    monkeypatch.setattr(FreeDave, "check_config", lambda self, config: None)
    assert decode(model, PROMPTS, fast).answer.tolist() != base.answer.tolist()
