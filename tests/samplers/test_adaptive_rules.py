"""Adaptive rules on hand-built statistics (thresholds, factor, entropy bounds, Learn2PD), and
the stoppers' schedules and all-in commit on tiny models."""
from __future__ import annotations

import math

import pytest
import torch

from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.kernels import TokenStats
from dllm.samplers import RuleInput, make_rule, make_stopper
from dllm.samplers.rules.learn2pd import ConfidenceFilter
from dllm.samplers.stoppers.prophet import prophet_threshold
from dllm.samplers.stoppers.sched import sched_threshold

ALL = [True] * 4


def _inp(prob, eligible=None, entropy=None) -> RuleInput:
    prob = torch.tensor(prob, dtype=torch.float32)
    eligible = torch.ones_like(prob, dtype=torch.bool) if eligible is None else torch.tensor(eligible)
    entropy = -torch.log(prob.clamp_min(1e-6)) if entropy is None else torch.tensor(entropy, dtype=torch.float32)
    stats = TokenStats(torch.zeros_like(prob, dtype=torch.long), prob, prob, prob * 10, entropy)
    return RuleInput(stats=stats, eligible=eligible, step=0, num_steps=4, block_masks=eligible.sum(-1))


# rows: some above / nothing above / all above / one mask left / nothing eligible (block done)
ROWS = [[0.5, 0.95, 0.91, 0.2], [0.3, 0.4, 0.1, 0.2], [0.99, 0.97, 0.98, 0.99], [0.1, 0.99, 0.2, 0.3],
        [0.99, 0.99, 0.99, 0.99]]
ELIGIBLE = [ALL, ALL, ALL, [False, False, True, False], [False] * 4]


def test_threshold_batch_of_row_states():
    out = make_rule("threshold", {"tau": 0.9})(_inp(ROWS, ELIGIBLE)).tolist()
    assert out[0] == [False, True, True, False]
    assert out[1] == [False, True, False, False]  # nothing above tau: exactly the most confident
    assert out[2] == ALL
    assert out[3] == [False, False, True, False]  # one mask left: it is committed
    assert out[4] == [False] * 4


def test_threshold_ties_go_to_the_lower_index():
    out = make_rule("threshold", {"tau": 0.95})(_inp([[0.5, 0.7, 0.7, 0.1]])).tolist()
    assert out == [[False, True, False, False]]
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        make_rule("threshold", {"tau": 1.5})


def test_factor_rule():
    rule = make_rule("factor", {"factor": 1.0})
    # sorted 0.9 (always), 0.7: 3 * 0.3 = 0.9 <= 1 ok, 0.6: 4 * 0.4 = 1.6 > 1 stop
    out = rule(_inp([[0.6, 0.9, 0.7, 0.1], [0.2, 0.1, 0.3, 0.05], [0.99] * 4, [0.99, 0.5, 0.98, 0.97]],
                    [ALL, ALL, ALL, [False, True, True, True]])).tolist()
    assert out[0] == [False, True, True, False]
    assert out[1] == [False, False, True, False]  # nothing passes: one token
    assert out[2] == ALL  # the prefix reaches the last token: all
    assert out[3] == [False, False, True, True]  # 0.99 is decoded already and does not count
    # ties keep their order: 0.8, 0.8 -> 3 * 0.2 = 0.6 ok; the third 0.8 -> 4 * 0.2 = 0.8 ok
    assert rule(_inp([[0.8, 0.8, 0.8, 0.1]])).tolist() == [[True, True, True, False]]
    assert make_rule("factor", {"factor": 0.5})(_inp([[0.8, 0.8, 0.8, 0.1]])).tolist() == [[True, False, False, False]]


def test_eb_sampler():
    rule = make_rule("eb_sampler", {"gamma": 0.1})
    ent = [[0.01, 0.05, 0.5, 0.02], [1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.9, 0.0], [0.3, 0.01, 0.02, 0.5]]
    eligible = [ALL, ALL, ALL, [True, False, True, True]]
    out = rule(_inp([[0.9] * 4] * 4, eligible, entropy=ent)).tolist()
    assert out[0] == ALL  # ascending 0.01, 0.02, 0.05, 0.5: bounds 0, .01, .03, .08
    assert out[1] == [True, False, False, False]  # at least one, the lowest entropy
    assert out[2] == ALL  # 0 + 0 + 0 and the largest term is free
    assert out[3] == [True, False, True, False]  # 0.02, 0.3 (bound .02); + 0.5 -> .32 > .1


def test_entropy_threshold():
    rule = make_rule("entropy_threshold", {"tau": 0.5})
    out = rule(_inp([[0.9] * 3, [0.5] * 3, [0.5] * 3], [[True] * 3, [True] * 3, [False, False, True]],
                    entropy=[[0.1, 0.6, 0.4], [0.9, 0.7, 0.8], [0.1, 0.1, 3.0]])).tolist()
    assert out == [[True, False, True], [False, True, False], [False, False, True]]


def _identity_filter(width: int) -> ConfidenceFilter:
    f = ConfidenceFilter(width)
    with torch.no_grad():
        f.net[0].weight.copy_(torch.eye(width))
        f.net[0].bias.zero_()
        f.net[2].weight.copy_(torch.eye(width) * 20)
        f.net[2].bias.fill_(-10)  # score = 20 c - 10: sigmoid > 0.9 for c > ~0.61
    return f


def test_learn2pd_filter_accepts_on_top_of_floor(tmp_path):
    f = _identity_filter(3)
    assert sum(p.numel() for p in ConfidenceFilter(32).parameters()) == 2112  # the paper's size
    f.save(tmp_path)
    rule = make_rule("learn2pd", {"filter": str(tmp_path), "tau": 0.9})
    out = rule(_inp([[0.9, 0.1, 0.8], [0.2, 0.3, 0.1], [0.9, 0.1, 0.8]],
                    [[True] * 3, [True] * 3, [False, True, True]])).tolist()
    assert out == [[True, False, True], [False, True, False], [False, False, True]]
    with pytest.raises(ValueError, match="set block_length"):
        rule(_inp([[0.9, 0.1]]))


def test_learn2pd_errors(tmp_path, tiny_models):
    with pytest.raises(ValueError, match="filter=DIR"):
        make_rule("learn2pd", {})
    with pytest.raises(FileNotFoundError, match="train-filter"):
        make_rule("learn2pd", {"filter": str(tmp_path)})
    _identity_filter(3).save(tmp_path)
    cfg = GenerationConfig(gen_length=16, block_length=8, policy="learn2pd", policy_args={"filter": str(tmp_path)})
    with pytest.raises(ValueError, match="trained for windows of 3 positions.*has 8"):
        decode(tiny_models["llada"].model, [[5, 6]], cfg)  # before any forward


def test_sched_schedules():
    for schedule in ("linear", "cosine", "exp"):
        values = sched_threshold(torch.linspace(0, 1, 11), schedule, 7.5, 2.5, 4.0)
        assert float(values[0]) == pytest.approx(7.5)
        assert bool((values[1:] <= values[:-1]).all())
    assert float(sched_threshold(0.5, "linear", 7.5, 2.5, 4)) == pytest.approx(5.0)
    assert float(sched_threshold(0.5, "cosine", 7.5, 2.5, 4)) == pytest.approx(5.0)
    assert float(sched_threshold(0.25, "cosine", 7.5, 2.5, 4)) == pytest.approx(2.5 + 5 * (1 + math.cos(math.pi / 4)) / 2)
    assert float(sched_threshold(1.0, "exp", 7.5, 2.5, 16)) == pytest.approx(2.5 + 5 * math.exp(-16))
    assert float(sched_threshold(3.0, "linear", 7.5, 2.5, 4)) == pytest.approx(2.5)  # past the budget
    assert prophet_threshold(torch.tensor([0.1, 0.32, 0.5, 0.66, 0.9])).tolist() == [7.5, 7.5, 5.0, 5.0, 2.5]
    with pytest.raises(ValueError, match="unknown SchED schedule"):
        make_stopper("sched", {"schedule": "step"})
    with pytest.raises(ValueError, match="tau_low <= tau_high"):
        make_stopper("sched", {"tau_high": 1.0, "tau_low": 2.0})
    with pytest.raises(ValueError, match="no option"):
        make_stopper("sched", {"exited": None})  # internal state is not an option


def _expected_argmax(model, prompt: list[int], gen_length: int) -> list[int]:
    """The argmax of the first full forward at every answer position (mask id excluded)."""
    L = len(prompt) + gen_length
    tokens = torch.tensor([prompt + [model.mask_token_id] * gen_length], device=model.device)
    logits = model(tokens, torch.arange(L, device=model.device)[None])
    if model.shift_logits:
        logits = torch.cat([logits[:, :1], logits[:, :-1]], 1)
    logits[..., model.mask_token_id] = float("-inf")
    return logits[0, len(prompt) :].argmax(-1).tolist()


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("stopper,args", [("sched", {"tau_high": -1.0, "tau_low": -1.0}),
                                          ("prophet", {"thresholds": [-1, -1, -1]})])
@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_exit_commits_every_remaining_argmax(tiny_models, family, stopper, args, cache):
    """A threshold that is always met: the first forward fills the whole answer with its argmax."""
    model = tiny_models[family].model
    cfg = GenerationConfig(gen_length=16, block_length=8, stopper=stopper, stopper_args=args,
                           cache=cache, stop_at_eos=False)
    with torch.inference_mode():
        for prompt in ([5, 17, 42], [7, 8, 9, 10, 11]):
            out = decode(model, [prompt], cfg)
            assert out.answer[0].tolist() == _expected_argmax(model, prompt, 16)
            assert out.nfe.tolist() == [1]


@pytest.mark.parametrize("stopper", ["sched", "prophet"])
def test_unreachable_threshold_changes_nothing(tiny_models, stopper):
    model = tiny_models["llada"].model
    base = GenerationConfig(gen_length=16, block_length=8, steps=8, policy="low_confidence")
    args = {"tau_high": 1e9, "tau_low": 1e9} if stopper == "sched" else {"thresholds": [1e9] * 3}
    cfg = GenerationConfig(gen_length=16, block_length=8, steps=8, stopper=stopper, stopper_args=args)
    prompts = [[5, 17, 42], [100, 3]]
    plain, stopped = decode(model, prompts, base), decode(model, prompts, cfg)
    assert stopped.answer.tolist() == plain.answer.tolist()
    assert stopped.nfe.tolist() == plain.nfe.tolist()
