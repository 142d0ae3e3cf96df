"""threshold with ``budget_cap=True`` is Dream's official confidence_threshold, token for token."""
from __future__ import annotations

import pytest

from dllm import GenerationConfig
from dllm.engine.decoding import decode
from tests.oracles import dream_threshold_generate

PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13], [100, 3], [55, 66, 77, 88, 99]]


def _decode(model, prompts, *, steps, tau, budget_cap=True):
    cfg = GenerationConfig(gen_length=16, steps=steps, policy="threshold", stop_at_eos=False,
                           policy_args={"tau": tau, "budget_cap": budget_cap})
    return decode(model, prompts, cfg)


@pytest.mark.parametrize("steps", [4, 8])
@pytest.mark.parametrize("tau", [0.01, 0.03])
def test_matches_dreams_confidence_threshold(tiny_models, steps, tau):
    model = tiny_models["dream"].model
    out = _decode(model, PROMPTS, steps=steps, tau=tau)
    for row, prompt in enumerate(PROMPTS):
        expected = dream_threshold_generate(model, prompt, steps=steps, gen_length=16, threshold=tau)
        assert out.answer[row].tolist() == expected


def test_cap_limits_tokens_per_step(tiny_models):
    """With tau 0 every mask passes the threshold: the uncapped rule fills the block in one
    forward, the capped one spends exactly the step budget."""
    model = tiny_models["dream"].model
    assert _decode(model, PROMPTS, steps=4, tau=0.0, budget_cap=False).nfe.tolist() == [1] * 4
    assert _decode(model, PROMPTS, steps=4, tau=0.0).nfe.tolist() == [4] * 4


def test_capped_batch_equals_single_runs(tiny_models):
    model = tiny_models["llada"].model
    batch = _decode(model, PROMPTS, steps=8, tau=0.02)
    for row, prompt in enumerate(PROMPTS):
        single = _decode(model, [prompt], steps=8, tau=0.02)
        assert batch.answer[row].tolist() == single.answer[0].tolist()
        assert int(batch.nfe[row]) == int(single.nfe[0])


def test_budget_cap_must_be_a_bool():
    from dllm.samplers import make_rule

    with pytest.raises(ValueError, match="option 'budget_cap' expects bool"):
        make_rule("threshold", {"budget_cap": "yes"})
