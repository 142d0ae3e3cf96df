"""``first_token="argmax"`` reproduces Fast-dLLM's own Dream and v2 loops token for token."""
from __future__ import annotations

import pytest

import dllm
from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.models.tiny import write_tiny_checkpoint
from tests.oracles import fastdllm_dream_generate, fastdllm_v2_generate

DREAM_PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13], [100, 3], [55, 66, 77, 88, 99]]
BD = 8
V2_PROMPTS = [[5, 17, 42, 9, 1, 2, 3, 4], list(range(30, 46))]  # multiples of bd_size
TAU = 0.02  # the tiny random models are unsure: a low tau still commits several tokens a step


@pytest.fixture(scope="module")
def block_causal(tmp_path_factory):
    path = write_tiny_checkpoint(tmp_path_factory.mktemp("bd"), "fast_dllm_v2", seed=5, block_size=BD)
    return dllm.load(path).model


def _compat(model, prompts, *, cache, block_length, gen_length=16, first_token="argmax", **options):
    cfg = GenerationConfig(gen_length=gen_length, block_length=block_length, policy="threshold",
                           policy_args={"tau": TAU}, cache=cache, stop_at_eos=False,
                           cache_args={"first_token": first_token, **options.pop("cache_args", {})},
                           **options)
    return decode(model, prompts, cfg)


@pytest.mark.parametrize("cache", ["prefix", "dual"])
@pytest.mark.parametrize("block_length", [4, 8])
def test_dream_matches_fastdllm_block_loop(tiny_models, cache, block_length):
    model = tiny_models["dream"].model
    out = _compat(model, DREAM_PROMPTS, cache=cache, block_length=block_length)
    parallel = False
    for row, prompt in enumerate(DREAM_PROMPTS):
        expected = fastdllm_dream_generate(model, prompt, gen_length=16, block_length=block_length,
                                           threshold=TAU, dual_cache=cache == "dual")
        assert out.answer[row].tolist() == expected
        parallel |= int(out.nfe[row]) < 16  # some step committed more than one token
    assert parallel


def test_dream_rule_mode_differs_from_fastdllm(tiny_models):
    """The default lets the rule decide at the refresh: a different (not a wrong) trajectory."""
    model = tiny_models["dream"].model
    rule = _compat(model, DREAM_PROMPTS, cache="dual", block_length=4, first_token="rule")
    compat = _compat(model, DREAM_PROMPTS, cache="dual", block_length=4)
    assert rule.answer.tolist() != compat.answer.tolist()


@pytest.mark.parametrize("small_block", [BD // 2, BD])
def test_v2_matches_fastdllm_v2_loop(block_causal, small_block):
    options = {}
    if small_block < BD:  # v2 without its sub-block cache recomputes the block every step
        options = dict(sub_block_length=small_block, cache_args={"refresh_every": 1})
    out = _compat(block_causal, V2_PROMPTS, cache="dual", block_length=BD, **options)
    for row, prompt in enumerate(V2_PROMPTS):
        expected = fastdllm_v2_generate(block_causal, prompt, gen_length=16, small_block_size=small_block,
                                        threshold=TAU)
        assert out.answer[row].tolist() == expected


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("cache", ["prefix", "dual"])
def test_argmax_first_token_batch_equals_single_runs(tiny_models, family, cache):
    model = tiny_models[family].model
    batch = _compat(model, DREAM_PROMPTS, cache=cache, block_length=4)
    for row, prompt in enumerate(DREAM_PROMPTS):
        single = _compat(model, [prompt], cache=cache, block_length=4)
        assert batch.answer[row].tolist() == single.answer[0].tolist()
        assert int(batch.nfe[row]) == int(single.nfe[0])


def test_unknown_first_token_is_refused(tiny_models):
    with pytest.raises(ValueError, match="first_token must be one of"):
        tiny_models["dream"].generate("hi", gen_length=8, cache="dual", cache_args={"first_token": "first"})


V2_UNALIGNED = [[5, 17, 42], list(range(30, 43)), [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]]  # 3, 13, 11


@pytest.mark.parametrize("cache", ["prefix", "dual"])
def test_v2_unaligned_prompts_match_the_official_partition(block_causal, cache):
    """Blocks count from position 0 of prompt + answer, as v2 was trained: a prompt ending
    mid-block decodes the rest of its last block with the first answer tokens (no argmax first
    token there; the next blocks' first tokens come from the block commit). The official loop
    decodes G - P % bd answer positions (+ the next block's argmax token); dllm decodes the
    whole blocks holding G and cuts there, and every position both decode agrees."""
    out = _compat(block_causal, V2_UNALIGNED, cache=cache, block_length=BD)
    for row, prompt in enumerate(V2_UNALIGNED):
        expected = fastdllm_v2_generate(block_causal, prompt, gen_length=16, small_block_size=BD, threshold=TAU)
        assert len(expected) >= 16 - len(prompt) % BD
        assert out.answer[row].tolist()[: len(expected)] == expected
        assert out.answer.shape[1] == 16


def test_v2_unaligned_ragged_batch_equals_single_runs(block_causal):
    for cache in ("prefix", "dual"):
        batch = _compat(block_causal, V2_UNALIGNED + V2_PROMPTS, cache=cache, block_length=BD)
        for row, prompt in enumerate(V2_UNALIGNED + V2_PROMPTS):
            single = _compat(block_causal, [prompt], cache=cache, block_length=BD)
            assert batch.answer[row].tolist() == single.answer[0].tolist()
            assert int(batch.nfe[row]) == int(single.nfe[0])


@pytest.mark.parametrize("cache", ["prefix", "dual"])
def test_dream_loops_cached_forward_is_its_uncached_self(tiny_models, cache):
    """The official loop with its cache refilled before every step gives the tokens of full
    forwards: the cached forward the loops above share with the engine (the model's K/V write
    and its attention over the buffers) is checked against uncached forwards, not itself."""
    model = tiny_models["dream"].model
    for prompt in DREAM_PROMPTS:
        kw = dict(gen_length=16, block_length=4, threshold=TAU, dual_cache=cache == "dual")
        cached = fastdllm_dream_generate(model, prompt, refill="step", **kw)
        assert cached == fastdllm_dream_generate(model, prompt, refill="none", **kw)


@pytest.mark.parametrize("small_block", [BD // 2, BD])
def test_v2_cached_loop_is_its_uncached_self(block_causal, small_block):
    """A block-causal model's cache is exact: the official cached loop, which the engine matches
    above, equals the same loop recomputing every forward from position 0 without K/V."""
    for prompt in V2_PROMPTS + [[5, 17, 42]]:
        kw = dict(gen_length=16, small_block_size=small_block, threshold=TAU)
        cached = fastdllm_v2_generate(block_causal, prompt, **kw)
        assert cached == fastdllm_v2_generate(block_causal, prompt, use_cache=False, **kw)
