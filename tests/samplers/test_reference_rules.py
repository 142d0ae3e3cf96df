"""The reference rules at temperature 0 reproduce the official loops token for token, and a
ragged batch gives the same tokens as single runs."""
from __future__ import annotations

import pytest
import torch

from dllm import GenerationConfig
from dllm.engine.decoding import decode
from tests.oracles import dream_generate, llada_generate

PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13], [100, 3], [55, 66, 77, 88, 99]]


@pytest.mark.parametrize("gen_length,block_length,steps", [(16, 16, 16), (16, 8, 8), (24, 8, 12), (16, 4, 4)])
def test_llada_low_confidence_matches_official(tiny_models, gen_length, block_length, steps):
    model = tiny_models["llada"].model
    cfg = GenerationConfig(gen_length=gen_length, block_length=block_length, steps=steps, stop_at_eos=False)
    for prompt in PROMPTS[:3]:
        ours = decode(model, [prompt], cfg).answer[0].tolist()
        assert ours == llada_generate(model, prompt, steps=steps, gen_length=gen_length, block_length=block_length)


@pytest.mark.parametrize("alg", ["maskgit_plus", "topk_margin", "entropy"])
@pytest.mark.parametrize("gen_length,steps", [(16, 16), (16, 5), (12, 7)])
def test_dream_rules_match_official(tiny_models, alg, gen_length, steps):
    model = tiny_models["dream"].model
    cfg = GenerationConfig(gen_length=gen_length, steps=steps, policy=alg, stop_at_eos=False)
    for prompt in PROMPTS[:3]:
        ours = decode(model, [prompt], cfg).answer[0].tolist()
        assert ours == dream_generate(model, prompt, steps=steps, gen_length=gen_length, alg=alg)


@pytest.mark.parametrize("family,policy", [("llada", "low_confidence"), ("llada", "maskgit_plus"),
                                           ("dream", "maskgit_plus"), ("dream", "topk_margin"),
                                           ("dream", "entropy"), ("dream", "low_confidence")])
@pytest.mark.parametrize("stop_at_eos", [False, True])
def test_batch_equals_single_runs(tiny_models, family, policy, stop_at_eos):
    model = tiny_models[family].model
    cfg = GenerationConfig(gen_length=16, block_length=8, steps=8, policy=policy, stop_at_eos=stop_at_eos)
    batch = decode(model, PROMPTS, cfg)
    for row, prompt in enumerate(PROMPTS):
        single = decode(model, [prompt], cfg)
        assert batch.answer[row].tolist() == single.answer[0].tolist()
        assert int(batch.nfe[row]) == int(single.nfe[0])


def test_classifier_free_guidance_batches_like_single_runs(tiny_models):
    """cfg_scale > 0 doubles the batch with the prompt masked out; rows stay independent."""
    model = tiny_models["llada"].model
    cfg = GenerationConfig(gen_length=8, steps=8, cfg_scale=1.5, stop_at_eos=False)
    plain = decode(model, PROMPTS[:2], GenerationConfig(gen_length=8, steps=8, stop_at_eos=False))
    guided = decode(model, PROMPTS[:2], cfg)
    assert guided.answer.tolist() != plain.answer.tolist()
    for row, prompt in enumerate(PROMPTS[:2]):
        assert decode(model, [prompt], cfg).answer[0].tolist() == guided.answer[row].tolist()
    with pytest.raises(ValueError, match="cache='none' only"):
        decode(model, PROMPTS[:1], GenerationConfig(gen_length=8, cfg_scale=1.0, cache="dual"))
