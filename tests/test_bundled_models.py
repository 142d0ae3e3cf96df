"""Every bundled model solves fresh copy and reverse prompts at one token per step (the
uniform-state one under its entropy-bound acceptance, up to one step per token); the
block-causal ones' caches are exact (cached decode == uncached, token for token, on official
ParallelBench prompts); the MoE one routes to every expert; the uniform-state one is
transformers' DiffusionGemma (its own class loads the files and its generate gives dllm's tokens)."""
from __future__ import annotations

import functools

import pytest
import torch

import dllm
from dllm import GenerationConfig
from dllm.bench.metrics import score
from dllm.data.prompts import build_messages, load_samples, load_task_configs
from dllm.engine.decoding import decode
from dllm.models.bundled import bundled_models
from dllm.train.corpus import TaskCorpus
from tests.pb_data import require_data

NAMES = sorted(bundled_models())


@pytest.mark.parametrize("name", NAMES)  # the uniform-state model under its defaults (eb_sampler)
def test_solves_fresh_copy_and_reverse_at_one_token_per_step(name):
    lm = dllm.load(name)
    data = require_data()
    specs = load_task_configs(data)
    corpus = TaskCorpus(data, seed=777_001)  # seeds no training run used
    for task in ("waiting_line/copy", "waiting_line/reverse"):
        examples = [corpus.sample(task) for _ in range(4)]
        for ex in examples:
            out = lm.generate(ex.messages, gen_length=ex.gen_length, steps=ex.gen_length)
            assert score(specs[task].metric, out.texts[0], ex.sample) == 1, (name, task, out.texts[0])


BLOCK_CAUSAL = [n for n in NAMES if bundled_models()[n].config.get("bd_size")
                or bundled_models()[n].config.get("model_type") == "llada2_moe"]


CACHE_POLICIES = (("low_confidence", ()), ("threshold", (("tau", 0.9),)))


def _official_prompts(lm) -> list[list[int]]:
    """Official test prompts, zero-shot, ragged lengths."""
    data = require_data()
    specs = load_task_configs(data)
    return [lm.encode(build_messages(specs[task], sample, shots=0))
            for task in ("waiting_line/sort", "waiting_line/shuffle", "puzzle/latin_square_n4")
            for sample in load_samples(data, task)[::40]]


def _block_config(policy: str, args: tuple, **options) -> GenerationConfig:
    return GenerationConfig(gen_length=64, block_length=8, steps=64, policy=policy, policy_args=dict(args), **options)


@functools.lru_cache(maxsize=None)
def _uncached_answers(name: str, policy: str, args: tuple, sub: int | None) -> list[list[int]]:
    """The uncached decode every cache of one model is held to: decoded once, not once a cache."""
    lm = dllm.load(name)
    return decode(lm.model, _official_prompts(lm), _block_config(policy, args, sub_block_length=sub)).answer.tolist()


@pytest.mark.parametrize("name", BLOCK_CAUSAL)
@pytest.mark.parametrize("cache, sub", [("prefix", None), ("dual", None)])
def test_block_causal_caches_are_exact_on_parallelbench_prompts(name, cache, sub):
    lm = dllm.load(name)
    prompts = _official_prompts(lm)
    for policy, args in CACHE_POLICIES:
        cached = decode(lm.model, prompts, _block_config(policy, args, cache=cache, sub_block_length=sub))
        assert cached.answer.tolist() == _uncached_answers(name, policy, args, sub)  # same windows


DREAM = [n for n in NAMES if bundled_models()[n].config.get("model_type", "").lower() == "dream"]


@pytest.mark.parametrize("name", DREAM)
@pytest.mark.parametrize("alg", ["maskgit_plus", "topk_margin", "entropy"])
def test_dream_model_rules_decode_as_dreams_own_loop(name, alg):
    from tests.oracles import dream_generate

    lm = dllm.load(name)
    corpus = TaskCorpus(require_data(), seed=777_002)
    for task, steps in (("waiting_line/reverse", 32), ("waiting_line/sort", 11)):
        ex = corpus.sample(task)
        prompt = lm.encode(ex.messages)
        cfg = GenerationConfig(gen_length=ex.gen_length, steps=steps, policy=alg, stop_at_eos=False)
        ours = decode(lm.model, [prompt], cfg).answer[0].tolist()
        assert ours == dream_generate(lm.model, prompt, steps=steps, gen_length=ex.gen_length, alg=alg)


MOE = [n for n in NAMES if bundled_models()[n].config.get("num_experts")]


@pytest.mark.parametrize("name", MOE)
def test_moe_model_is_llada2_layout_and_routes_to_every_expert(name):
    from dllm.models.moe import MoEMLP

    config = bundled_models()[name].config
    assert config["num_experts"] >= 8 and config["num_experts_per_tok"] == 2
    assert config["num_shared_experts"] == 1 and config["first_k_dense_replace"] == 1
    lm = dllm.load(name)
    assert lm.model.attention == "block_causal" and lm.model.config.block_origin == "answer"
    layers = [m for m in lm.model.modules() if isinstance(m, MoEMLP)]
    assert len(layers) == config["num_hidden_layers"] - 1
    counts = [torch.zeros(m.cfg.n_experts, device=lm.model.device) for m in layers]
    for m, c in zip(layers, counts):
        def recorded(x2d, _route=m.route, _c=c):
            weights, ids = _route(x2d)
            _c += torch.bincount(ids.flatten(), minlength=len(_c)).float()
            return weights, ids
        m.route = recorded
    corpus = TaskCorpus(require_data(), seed=777_003)
    for task in ("waiting_line/sort", "waiting_line/shuffle", "puzzle/latin_square_n4"):
        ex = corpus.sample(task)
        lm.generate(ex.messages, gen_length=ex.gen_length, steps=ex.gen_length // 4)
    for i, c in enumerate(counts):
        assert (c > 0).all(), f"MoE layer {i + 1}: experts {(c == 0).nonzero().flatten().tolist()} never chosen"


UNIFORM = [n for n in NAMES if bundled_models()[n].config.get("model_type") == "diffusion_gemma"]


@pytest.mark.parametrize("name", UNIFORM)
def test_uniform_state_model_is_transformers_diffusion_gemma(name):
    """The shipped files are DiffusionGemma's own: transformers' class loads them (the vision
    tower aside) and its ``generate`` gives dllm's tokens in parity mode on official prompts."""
    try:
        from transformers import DiffusionGemmaForBlockDiffusion
        from transformers.models.diffusion_gemma.generation_diffusion_gemma import EntropyBoundSamplerConfig
    except ImportError:
        pytest.skip("the installed transformers has no models/diffusion_gemma (it came in 5.17)")
    lm = dllm.load(name, device="cpu")  # beside the reference on the CPU, drawing from the CPU's generator
    ref = DiffusionGemmaForBlockDiffusion.from_pretrained(bundled_models()[name].path).eval()
    data = require_data()
    specs = load_task_configs(data)
    eos, canvas = lm.model.config.eos_token_ids[0], lm.model.config.canvas_length
    for task in ("waiting_line/reverse", "puzzle/latin_square_n4"):
        prompt = lm.encode(build_messages(specs[task], load_samples(data, task)[7], shots=0))
        G = specs[task].max_tokens
        torch.manual_seed(3)
        with torch.no_grad():
            out = ref.generate(torch.tensor([prompt]), max_new_tokens=G, max_denoising_steps=canvas,
                               sampler_config=EntropyBoundSamplerConfig(entropy_bound=0.1), eos_token_id=eos,
                               pad_token_id=eos)
        ours = decode(lm.model, [prompt], GenerationConfig(gen_length=G, block_length=canvas, steps=G, seed=3,
                                                          strategy_args={"draws": "generator"}))
        expected = out.sequences[0, len(prompt):].tolist()
        expected = expected[: expected.index(eos) + 1] if eos in expected else expected
        assert ours.answer[0].tolist()[: len(expected)] == expected, task
