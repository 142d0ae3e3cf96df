"""Every adaptive rule and stopper composes with every registered cache mode (and sub-blocks),
and a ragged batch of 4 gives the same tokens and NFE as 4 single runs. EoTP runs on a model
biased towards end-of-text so that it really truncates."""
from __future__ import annotations

import pytest
import torch

from dllm import GenerationConfig
from dllm.cache import CACHES
from dllm.engine.decoding import decode
from dllm.samplers.rules.learn2pd import ConfidenceFilter

PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13], [100, 3], [55, 66, 77, 88, 99]]
CACHE_MODES = [dict(cache="none"), dict(cache="prefix"), dict(cache="dual"), dict(cache="dual", sub_block_length=4)]
# Random tiny models are unsure (p ~ 0.09, entropy ~ 4.5 nats): parameters are set so that every
# rule commits a varying number of tokens per step.
POLICIES = {
    "threshold": dict(policy="threshold", policy_args={"tau": 0.09}),
    "factor": dict(policy="factor", policy_args={"factor": 3.75}),
    "eb_sampler": dict(policy="eb_sampler", policy_args={"gamma": 4.4}),
    "entropy_threshold": dict(policy="entropy_threshold", policy_args={"tau": 4.5}),
    "learn2pd": dict(policy="learn2pd", policy_args={"tau": 0.5}),
    "sched": dict(policy="low_confidence", stopper="sched", stopper_args={"tau_high": 3.0, "tau_low": 0.5}),
    "sched_masked": dict(policy="threshold", policy_args={"tau": 0.09}, stopper="sched",
                         stopper_args={"schedule": "cosine", "tau_high": 3.0, "tau_low": 0.5, "span": "masked"}),
    "prophet": dict(policy="factor", stopper="prophet", stopper_args={"thresholds": [4.0, 2.0, 0.5]}),
    "eotp": dict(policy="threshold", policy_args={"tau": 0.3}, stopper="eotp"),
    "eotp_learn2pd": dict(policy="learn2pd", policy_args={"tau": 0.5}, stopper="eotp"),
}


class EosBias:
    """A model whose end-of-text logit rises from position id ``start`` on (most at ``start``),
    so each ragged row predicts its end at a different answer index."""

    def __init__(self, model, start: int = 12) -> None:
        self.inner, self.start = model, start

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, tokens, positions, visible=None, cache=None, cache_write=0, logits_for=None):
        logits = self.inner(tokens, positions, visible, cache, cache_write, logits_for)
        if logits_for is not None:  # the queries whose logits were computed
            positions = positions[:, logits_for[0] : logits_for[1]]
        bias = (20.0 - 0.5 * (positions - self.start).float()) * (positions >= self.start)  # (N, T)
        return logits.index_add(-1, torch.tensor([self.eos_token_ids[0]], device=logits.device), bias[..., None].to(logits.dtype))


def _cache_id(cache: dict) -> str:
    return "+".join(f"{k}={v}" for k, v in cache.items())


@pytest.fixture(scope="module")
def filter_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("filter")
    torch.manual_seed(0)
    ConfidenceFilter(8).save(path)
    return str(path)


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("cache", CACHE_MODES, ids=_cache_id)
@pytest.mark.parametrize("name", list(POLICIES))
def test_batch_equals_single(tiny_models, filter_dir, family, cache, name):
    if cache["cache"] not in CACHES:
        pytest.skip(f"cache mode {cache['cache']!r} is not registered")
    policy = dict(POLICIES[name])
    if policy["policy"] == "learn2pd":
        if cache.get("sub_block_length"):
            pytest.skip("an 8-wide filter does not fit 4-wide sub-blocks (the error is tested in test_adaptive_rules)")
        policy["policy_args"] = {**policy["policy_args"], "filter": filter_dir}
    model = tiny_models[family].model
    if policy.get("stopper") == "eotp":
        model = EosBias(model)
    cfg = GenerationConfig(gen_length=16, block_length=8, steps=16, **cache, **policy)
    batch = decode(model, PROMPTS, cfg)
    for row, prompt in enumerate(PROMPTS):
        single = decode(model, [prompt], cfg)
        assert batch.answer[row].tolist() == single.answer[0].tolist(), f"row {row}"
        assert int(batch.nfe[row]) == int(single.nfe[0]), f"row {row}"
    assert not bool((batch.answer == model.mask_token_id).any())
    if policy.get("stopper") == "eotp":  # every row ends by position id 12 and stops paying there
        eos = model.eos_token_ids[0]
        for row, prompt in enumerate(PROMPTS):
            cut = 12 - len(prompt)
            assert batch.answer[row, cut + 1 :].eq(eos).all(), f"row {row}"


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("cache", ["none", "prefix"])
def test_eotp_shortens_forwards(tiny_models, family, cache):
    model = EosBias(tiny_models[family].model)
    prompt = [[5, 17, 42]]  # predicted end at answer index 9 (position id 12), in block 2 of 4
    base = dict(gen_length=32, block_length=8, policy="threshold", policy_args={"tau": 0.3}, cache=cache)
    plain = decode(model, prompt, GenerationConfig(**base, stop_at_eos=False))
    cut = decode(model, prompt, GenerationConfig(**base, stopper="eotp", stop_at_eos=False))
    assert cut.answer[0, 10:].eq(model.eos_token_ids[0]).all()
    assert int(cut.token_forwards[0]) < int(plain.token_forwards[0])
    assert int(cut.nfe[0]) < int(plain.nfe[0])  # blocks 3 and 4 cost nothing
