"""SSD is lossless: its tree walk gives the tokens of the one-step-per-forward decode of its base
rule (the stepwise decode at one token per step), for every rule, cache, ragged batch and at
temperature > 0, with each row its single run's tokens and NFE; configurations where a candidate
state cannot be the base decode's state are refused."""
from __future__ import annotations

import pytest
import torch

from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.engine.policies import check_policies
from dllm.samplers.strategies.ssd import SSD, tree_nodes
from tests.rule_configs import RULE_OPTIONS, VARIANTS, EndsAt, rule_config, save_filter

PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13], [100, 3], [55, 66, 77, 88, 99]]
CACHES = [dict(cache="none"), dict(cache="prefix"), dict(cache="dual"), dict(cache="adaptive"),
          dict(cache="adaptive", cache_args={"select": "window", "ratio": 1.0})]


@pytest.fixture(scope="module")
def filter_dir(tmp_path_factory):
    return save_filter(tmp_path_factory.mktemp("filter"), 8)


def _fields(cfg: GenerationConfig) -> dict:
    return {name: getattr(cfg, name) for name in GenerationConfig.__dataclass_fields__}


def _check(model, cfg: GenerationConfig, prompts=PROMPTS):
    """SSD's answer equals the plain decode's; each row equals its single run (tokens and NFE)."""
    fast = decode(model, prompts, cfg)
    base = decode(model, prompts, GenerationConfig(**{**_fields(cfg), "strategy": "plain", "strategy_args": {}}))
    assert fast.answer.tolist() == base.answer.tolist()
    for row, prompt in enumerate(prompts):
        single = decode(model, [prompt], cfg)
        assert fast.answer[row].tolist() == single.answer[0].tolist(), f"row {row}"
        assert int(fast.nfe[row]) == int(single.nfe[0]), f"row {row}"
    return fast, base


def test_tree_nodes_are_the_chain_and_its_adjacent_swaps():
    # 0: masked; drafted steps 1..4 commit 1, 2, 3, 4 at positions 0..3
    chain = torch.tensor([[[1, 0, 0, 0], [1, 2, 0, 0], [1, 2, 3, 0], [1, 2, 3, 4]]])
    nodes, depth = tree_nodes(chain, swaps=True)
    assert nodes[0, 4:].tolist() == [[1, 0, 3, 0], [1, 2, 0, 4]]  # steps 2 <-> 3, 3 <-> 4
    assert depth.tolist() == [1, 2, 3, 4, 2, 3]
    assert tree_nodes(chain, swaps=False)[0].tolist() == chain.tolist()


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("cache", CACHES, ids=lambda c: c["cache"] + str(c.get("cache_args", "")))
@pytest.mark.parametrize("N", [2, 4, 8])
def test_ssd_equals_stepwise_decoding(tiny_models, family, cache, N):
    """One token per step (steps == gen_length): the paper's stepwise decode."""
    cfg = GenerationConfig(gen_length=16, block_length=8, steps=16, stop_at_eos=False, strategy="ssd",
                           strategy_args={"num_drafts": N}, **cache)
    fast, base = _check(tiny_models[family].model, cfg)
    # never more forwards than the base decode; on the random tiny models some drafts verify
    assert (fast.nfe <= base.nfe).all() and int(fast.nfe.sum()) < int(base.nfe.sum()), (base.nfe.tolist(), fast.nfe.tolist())
    assert (fast.draft_rows >= fast.nfe).all()


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("rule", sorted(RULE_OPTIONS) + sorted(VARIANTS))
def test_every_rule_with_finished_rows(tiny_models, filter_dir, family, rule):
    """Ragged rows, one ending at once (EndsAt), stop_at_eos: every rule at N = 8."""
    cfg = GenerationConfig(gen_length=16, block_length=8, steps=16, strategy="ssd",
                           strategy_args={"num_drafts": 8}, **rule_config(rule, filter_dir))
    _check(EndsAt(tiny_models[family].model), cfg)


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("rule", ["low_confidence", "random", "threshold", "maskgit_plus_alg_temp"])
@pytest.mark.parametrize("sampling", [dict(temperature=1.0), dict(temperature=0.7, top_p=0.9), dict(temperature=0.3)],
                         ids=["T1", "T0.7-top_p", "T0.3"])
def test_ssd_is_lossless_when_sampling(tiny_models, filter_dir, family, rule, sampling):
    """A node d steps deep draws the noise the base decode draws d steps later."""
    cfg = GenerationConfig(gen_length=16, block_length=8, steps=16, seed=7, strategy="ssd",
                           strategy_args={"num_drafts": 4}, **rule_config(rule, filter_dir), **sampling)
    _check(tiny_models[family].model, cfg)


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_swap_nodes_are_walked_when_sampling(tiny_models, family):
    """At T = 0.3 the walk goes through swap nodes (fewer forwards than the chain alone), so
    the sampling test above sees their noise keys."""
    kw = dict(gen_length=16, block_length=8, steps=16, seed=7, temperature=0.3, strategy="ssd")
    model = tiny_models[family].model
    tree = decode(model, PROMPTS, GenerationConfig(**kw, strategy_args={"num_drafts": 4}))
    chain = decode(model, PROMPTS, GenerationConfig(**kw, strategy_args={"num_drafts": 4, "swaps": False}))
    assert int(tree.nfe.sum()) < int(chain.nfe.sum()), (tree.nfe.tolist(), chain.nfe.tolist())


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("cache", ["none", "dual"])
def test_sub_blocks_and_several_tokens_per_step(tiny_models, family, cache):
    """Sub-block windows and two tokens per step (steps = gen_length / 2) stay the base decode."""
    cfg = GenerationConfig(gen_length=32, block_length=16, sub_block_length=8, steps=16, cache=cache,
                           strategy="ssd", strategy_args={"num_drafts": 4})
    _check(EndsAt(tiny_models[family].model), cfg)


def test_swaps_are_taken(tiny_models, monkeypatch):
    """The walk moves through swap nodes: without them the same decode needs more forwards."""
    model = tiny_models["dream"].model
    kw = dict(gen_length=32, block_length=32, steps=32, stop_at_eos=False, strategy="ssd")
    tree = decode(model, PROMPTS, GenerationConfig(**kw, strategy_args={"num_drafts": 8}))
    chain = decode(model, PROMPTS, GenerationConfig(**kw, strategy_args={"num_drafts": 8, "swaps": False}))
    assert tree.answer.tolist() == chain.answer.tolist()
    assert int(tree.nfe.sum()) < int(chain.nfe.sum()), (tree.nfe.tolist(), chain.nfe.tolist())
    # the block-start forward is the canvas alone; every other one holds 8 chain + 6 swap nodes
    assert (tree.draft_rows == 14 * (tree.nfe - 1) + 1).all()


@pytest.mark.parametrize("bad, reason", [
    (dict(stopper="sched", stopper_args={"tau_high": 3.0, "tau_low": 0.5}), "use stopper='none'"),
    (dict(cache="dual", cache_args={"refresh_every": 4}), r"\['refresh_every'\].*drop them"),
    (dict(cache="adaptive", cache_args={"prompt_every": 4}), r"\['prompt_every'\].*drop them"),
    (dict(cache="adaptive", cache_args={"select": "window"}), "ratio=1.0"),
], ids=["stopper", "refresh_every", "prompt_every", "window_ratio"])
def test_refused_where_it_cannot_be_lossless(tiny_models, bad, reason):
    cfg = GenerationConfig(gen_length=16, block_length=8, strategy="ssd", **bad)
    with pytest.raises(ValueError, match=reason):
        check_policies(cfg)
    with pytest.raises(ValueError, match=reason):
        decode(tiny_models["llada"].model, PROMPTS[:1], cfg)


@pytest.mark.parametrize("family, cache", [
    ("dream", dict(cache="dual", cache_args={"refresh_every": 2})),
    ("dream", dict(cache="adaptive", cache_args={"prompt_every": 4})),
    ("llada", dict(cache="adaptive", cache_args={"select": "window", "ratio": 0.5, "from_layer": 0})),
], ids=["refresh_every", "prompt_every", "window_ratio"])
def test_refused_caches_would_not_be_lossless(tiny_models, monkeypatch, family, cache):
    """Why they are refused: SSD's candidate forwards read the block start's K/V, the base
    decode's refreshes change it (with the check bypassed the answers differ)."""
    model = tiny_models[family].model
    cfg = dict(gen_length=32, block_length=32, steps=32, stop_at_eos=False, **cache)
    base = decode(model, PROMPTS, GenerationConfig(**cfg))
    monkeypatch.setattr(SSD, "check_config", lambda self, config: None)
    fast = decode(model, PROMPTS, GenerationConfig(**cfg, strategy="ssd", strategy_args={"num_drafts": 4}))
    assert fast.answer.tolist() != base.answer.tolist()


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_classifier_free_guidance(tiny_models, family):
    """Guided candidate rows (each node with its unconditional twin) stay the base decode."""
    cfg = GenerationConfig(gen_length=16, block_length=8, steps=16, cfg_scale=1.0, strategy="ssd",
                           strategy_args={"num_drafts": 4})
    _check(tiny_models[family].model, cfg)
