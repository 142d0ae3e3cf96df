"""threshold with ``budget_cap=True`` is Dream's official confidence_threshold, token for token."""
from __future__ import annotations

import pytest
import torch

from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.kernels import TokenStats
from dllm.samplers import RuleInput, make_rule
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


def test_past_the_last_budgeted_step_the_cap_is_what_the_budget_left():
    """7 masks over 2 steps: 3 a step, a budget of 6. With 4 committed, any step from the last
    budgeted one on may commit 6 - 4 = 2 more, not a further share per step beyond the budget;
    every remaining mask clears tau, so the cap alone decides (the two most confident)."""
    prob = torch.tensor([[0.95, 0.97, 0.96, 0.2, 0.2, 0.2, 0.2]])
    stats = TokenStats(torch.zeros_like(prob, dtype=torch.long), prob, prob, prob * 10, -torch.log(prob))
    eligible = torch.tensor([[True, True, True, False, False, False, False]])  # 4 of the 7 committed
    rule = make_rule("threshold", {"tau": 0.9, "budget_cap": True})
    for step in (1, 2, 5):
        inp = RuleInput(stats=stats, eligible=eligible, step=step, num_steps=2, block_masks=torch.tensor([7]))
        assert rule(inp).tolist() == [[False, True, True, False, False, False, False]], step
