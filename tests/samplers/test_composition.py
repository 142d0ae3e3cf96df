"""Every rule and stopper composes with every cache mode, and a ragged batch of 4 gives the
same tokens as 4 single runs."""
from __future__ import annotations

import pytest

from dllm import GenerationConfig
from dllm.engine import decode
from dllm.samplers.learn2pd import ConfidenceFilter

PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13], [100, 3], [55, 66, 77, 88, 99]]
CACHES = [dict(cache="none"), dict(cache="prefix"), dict(cache="dual"), dict(cache="dual", sub_block_length=4)]


@pytest.fixture(scope="module")
def filter_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("filter")
    ConfidenceFilter(8).save(path)
    return str(path)


def _policies(filter_dir):
    return [
        dict(policy="threshold", policy_args={"tau": 0.5}),
        dict(policy="factor"),
        dict(policy="eb_sampler", policy_args={"gamma": 0.5}),
        dict(policy="entropy_threshold", policy_args={"tau": 1.0}),
        dict(policy="learn2pd", policy_args={"filter": filter_dir, "tau": 0.5}),
        dict(policy="low_confidence", stopper="sched", stopper_args={"tau_high": 3.0, "tau_low": 0.5}),
        dict(policy="threshold", stopper="prophet"),
        dict(policy="threshold", policy_args={"tau": 0.5}, stopper="eotp"),
    ]


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("cache", CACHES, ids=lambda c: "+".join(str(v) for v in c.values()))
@pytest.mark.parametrize("index", range(8))
def test_batch_equals_single(tiny_models, filter_dir, family, cache, index):
    policy = _policies(filter_dir)[index]
    if policy["policy"] == "learn2pd" and cache.get("sub_block_length"):
        policy = {**policy, "policy_args": {**policy["policy_args"], "filter": filter_dir}}
        pytest.skip("the 8-wide filter does not fit 4-wide sub-blocks (checked in test_adaptive_rules)")
    model = tiny_models[family].model
    cfg = GenerationConfig(gen_length=16, block_length=8, steps=16, **cache, **policy)
    batch = decode(model, PROMPTS, cfg)
    for row, prompt in enumerate(PROMPTS):
        single = decode(model, [prompt], cfg)
        assert batch.answer[row].tolist() == single.answer[0].tolist()
        assert int(batch.nfe[row]) == int(single.nfe[0])
    assert int(batch.nfe.max()) <= 16
