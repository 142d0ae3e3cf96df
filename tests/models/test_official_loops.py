"""Named options reproduce the official block-diffusion loops token for token.

LLaDA2.0's ``generate`` is ``policy="low_confidence", policy_args={"schedule": "block", "tau":
threshold}`` with ``steps = min(steps, gen_length // minimal_topk)`` per block; SDAR's
``block_diffusion_generate`` strategies are ``sequential`` / ``low_confidence`` with
``schedule="block"`` (``tau=confidence_threshold`` for ``low_confidence_dynamic``) and
``eb_sampler`` with ``bound="sum", gamma=eb_threshold`` for ``entropy_bounded``, with
``steps = denoising_steps`` per block. The oracles are tests/oracles_block.py. Prompts end
mid-block and on a block boundary (blocks count from position 0 of prompt + answer); every
cache gives the same tokens for these block-causal models, and a ragged batch gives each row's
single-run tokens and forwards.
"""
from __future__ import annotations

import dataclasses
import functools

import pytest

import dllm
from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.models.tiny import write_tiny_checkpoint
from tests.oracles_block import llada2_generate, sdar_generate
from tests.rule_configs import EndsAt

CACHES = ("none", "prefix", "dual")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("official_loops")
    return {fam: dllm.load(write_tiny_checkpoint(root / fam, fam), device="cpu", dtype="float32").model
            for fam in ("llada2_moe", "sdar")}


def _check_rows(model, prompts, config, expected, *, singles=True):
    """The batch decode equals ``expected`` per row (up to the oracle's length) and, with
    ``singles``, each row's single run (tokens and forwards)."""
    out = decode(model, prompts, config)
    assert out.answer.shape[1] == config.gen_length
    for row, (prompt, want) in enumerate(zip(prompts, expected)):
        got = out.answer[row].tolist()
        n = min(len(want), config.gen_length)
        assert got[:n] == want[:n], (row, len(prompt))
        if not singles:
            continue
        single = decode(model, [prompt], config)
        assert single.answer[0].tolist() == got and int(single.nfe[0]) == int(out.nfe[row]), (row, len(prompt))
    return out


def _parallel(out, config) -> bool:
    """Some row committed more than one token per forward (each row has at least gen_length
    masks to decode)."""
    return any(int(n) < config.gen_length for n in out.nfe)


# --- LLaDA2.0 generate -----------------------------------------------------------------------------

BL2 = 32  # LLaDA2's block (the model's attention block and generate's block_length)
LLADA2_PROMPTS = [list(range(5, 15)), list(range(40, 72)), list(range(7, 52)), [9, 4, 77]]  # 10, 32, 45, 3
TAU2 = 0.08  # the tiny random models are unsure (p ~ 0.09): some steps pass it, some take the quota


@functools.lru_cache(maxsize=None)
def _llada2_expected(model, steps, minimal_topk, gen_length=32, eos_id=None, tau=TAU2):
    return [llada2_generate(model, p, gen_length=gen_length, block_length=BL2, steps=steps, threshold=tau,
                            minimal_topk=minimal_topk, eos_id=eos_id) for p in LLADA2_PROMPTS]


def _llada2_config(*, steps, minimal_topk, cache, gen_length=32, tau=TAU2, **extra):
    per_block = min(steps, gen_length // minimal_topk)  # the official cap on the step count
    return GenerationConfig(gen_length=gen_length, block_length=BL2, steps=per_block * (gen_length // BL2),
                            policy="low_confidence", policy_args={"schedule": "block", "tau": tau},
                            cache=cache, **extra)


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("steps,minimal_topk", [(8, 1), (32, 4)])
def test_llada2_generate_is_reproduced(models, cache, steps, minimal_topk):
    m = models["llada2_moe"]
    config = _llada2_config(steps=steps, minimal_topk=minimal_topk, cache=cache, stop_at_eos=False)
    out = _check_rows(m, LLADA2_PROMPTS, config, _llada2_expected(m, steps, minimal_topk), singles=cache == "dual")
    # the threshold took more than the quota at some step: fewer forwards than the quota alone
    quota_only = decode(m, LLADA2_PROMPTS, _llada2_config(steps=steps, minimal_topk=minimal_topk, cache=cache,
                                                          tau=1.0, stop_at_eos=False))
    assert any(int(a) < int(b) for a, b in zip(out.nfe, quota_only.nfe))


def test_llada2_schedule_counts_the_block_length(models):
    """A prompt ending mid-block leaves fewer masks than the block length in its first block:
    LLaDA's own schedule (masks over steps) then decodes differently from the official one."""
    m = models["llada2_moe"]
    expected = _llada2_expected(m, 8, 1, tau=1.0)  # no step passes: the quota alone
    ours = decode(m, LLADA2_PROMPTS, _llada2_config(steps=8, minimal_topk=1, cache="none", tau=1.0,
                                                   stop_at_eos=False))
    llada = decode(m, LLADA2_PROMPTS, GenerationConfig(gen_length=32, block_length=BL2, steps=8,
                                                       policy="low_confidence", stop_at_eos=False))
    assert ours.answer.tolist() == [e[:32] for e in expected]
    assert llada.answer[0].tolist() != expected[0]  # 10-token prompt: 22 masks over 8 steps
    assert llada.answer[1].tolist() == expected[1]  # aligned: the schedules agree


@pytest.mark.parametrize("cache", CACHES)
def test_llada2_stops_after_end_of_text(models, cache):
    """End-of-text predicted with certainty at answer position 5 of every row: the official
    answer ends there (its loop finishes the block first), and so does dllm's, which stops the
    row once nothing before the end-of-text is masked (positions after it hold what the same
    steps committed, or end-of-text)."""
    m = models["llada2_moe"]
    for prompt in LLADA2_PROMPTS:
        stopper = EndsAt(m, position=len(prompt) + 5)
        want = llada2_generate(stopper, prompt, gen_length=32, block_length=BL2, steps=8, threshold=TAU2,
                               eos_id=m.eos_token_ids[0])
        assert len(want) == 6 and want[-1] == m.eos_token_ids[0]
        out = decode(stopper, [prompt], _llada2_config(steps=8, minimal_topk=1, cache=cache))
        assert out.answer[0].tolist()[:6] == want


# --- SDAR block_diffusion_generate -----------------------------------------------------------------

BL4 = 4
SDAR_PROMPTS = [list(range(5, 15)), list(range(40, 52)), list(range(7, 20)), [9, 4, 77]]  # leads 2, 0, 1, 3
TAU_SDAR, GAMMA = 0.07, 10.0  # entropies ~ 4.5 nats: 10 takes two a step (the paper's bound three)
SDAR_OPTIONS = {
    "sequential": ("sequential", {"schedule": "block"}),
    "low_confidence_static": ("low_confidence", {"schedule": "block"}),
    "low_confidence_dynamic": ("low_confidence", {"schedule": "block", "tau": TAU_SDAR}),
    "entropy_bounded": ("eb_sampler", {"bound": "sum", "gamma": GAMMA}),
}


@functools.lru_cache(maxsize=None)
def _sdar_expected(model, strategy, denoising_steps, prompts):
    return [sdar_generate(model, list(p), gen_length=8, block_length=BL4, denoising_steps=denoising_steps,
                          remasking_strategy=strategy, confidence_threshold=TAU_SDAR, eb_threshold=GAMMA)
            for p in prompts]


def _sdar_config(strategy, denoising_steps, cache, gen_length=8):
    policy, options = SDAR_OPTIONS[strategy]
    return GenerationConfig(gen_length=gen_length, block_length=BL4, steps=denoising_steps * (gen_length // BL4),
                            policy=policy, policy_args=options, cache=cache, stop_at_eos=False)


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("strategy", list(SDAR_OPTIONS))
def test_sdar_strategies_are_reproduced(models, strategy, cache):
    m = models["sdar"]
    config = _sdar_config(strategy, 4, cache)
    expected = _sdar_expected(m, strategy, 4, tuple(map(tuple, SDAR_PROMPTS)))
    out = _check_rows(m, SDAR_PROMPTS, config, expected, singles=cache == "dual")
    if strategy == "entropy_bounded":
        assert _parallel(out, config)
    if strategy == "low_confidence_dynamic":  # the threshold took more than the quota at some step
        static = decode(m, SDAR_PROMPTS, _sdar_config("low_confidence_static", 4, cache))
        assert any(int(a) < int(b) for a, b in zip(out.nfe, static.nfe))


@pytest.mark.parametrize("strategy", ["sequential", "low_confidence_static"])
def test_sdar_quota_of_two(models, strategy):
    """Two denoising steps per block of 4: quota 2 a step. Prompts whose tail leaves 1 or 3
    masks in the first block are left out: there the official topk takes more positions than
    masks remain and rewrites decoded ones (dllm takes the masks only; docs/ARCHITECTURE.md)."""
    m = models["sdar"]
    prompts = (tuple(range(5, 15)), tuple(range(40, 52)), (9, 4))  # leads 2, 0, 2
    config = _sdar_config(strategy, 2, "dual")
    out = _check_rows(m, [list(p) for p in prompts], config, _sdar_expected(m, strategy, 2, prompts))
    assert _parallel(out, config)


def test_sdar_stops_after_end_of_text(models):
    """End-of-text certain at answer position 5: the official loop finishes that block and
    leaves the later ones masked; dllm's text up to the end-of-text is the same."""
    m, eos = models["sdar"], models["sdar"].eos_token_ids[0]
    for prompt in SDAR_PROMPTS:
        stopper = EndsAt(m, position=len(prompt) + 5)
        want = sdar_generate(stopper, prompt, gen_length=8, block_length=BL4, denoising_steps=4,
                             remasking_strategy="low_confidence_dynamic", confidence_threshold=TAU_SDAR,
                             stop_ids=[eos])
        assert want.index(eos) == 5
        config = dataclasses.replace(_sdar_config("low_confidence_dynamic", 4, "dual"), stop_at_eos=True)
        assert decode(stopper, [prompt], config).answer[0].tolist()[:6] == want[:6]


def test_sdar_options_matter(models):
    """Without the named options the same rules decode differently: the paper's entropy bound,
    no threshold, LLaDA's masks-left schedule on a block that starts with the prompt tail."""
    m = models["sdar"]
    prompts = tuple(map(tuple, SDAR_PROMPTS))

    def answers(policy, options):
        cfg = GenerationConfig(gen_length=8, block_length=BL4, steps=8, policy=policy, policy_args=options,
                               stop_at_eos=False)
        return decode(m, SDAR_PROMPTS, cfg).answer.tolist()

    def want(strategy):
        return [e[:8] for e in _sdar_expected(m, strategy, 4, prompts)]

    assert answers("eb_sampler", {"gamma": GAMMA}) != want("entropy_bounded")
    assert answers("low_confidence", {"schedule": "block"}) != want("low_confidence_dynamic")
    # quota 2 over 2 steps vs the 2-token lead's 2 masks over 2 steps: 2 + 0 against 1 + 1
    q2 = (tuple(range(5, 15)),)
    masks = decode(m, SDAR_PROMPTS[:1], GenerationConfig(gen_length=8, block_length=BL4, steps=4,
                                                         policy="sequential", stop_at_eos=False))
    block = decode(m, SDAR_PROMPTS[:1], _sdar_config("sequential", 2, "none"))
    assert block.answer[0].tolist() == _sdar_expected(m, "sequential", 2, q2)[0][:8]
    assert int(masks.nfe[0]) > int(block.nfe[0])
