"""Adaptive rules on hand-built statistics: thresholds, factor, entropy bounds, Learn2PD."""
from __future__ import annotations

import math

import pytest
import torch

from dllm.kernels import TokenStats
from dllm.samplers import RuleInput, make_rule
from dllm.samplers.early_exit import prophet_threshold, sched_threshold
from dllm.samplers.learn2pd import ConfidenceFilter


def _inp(prob, eligible=None, entropy=None):
    prob = torch.tensor(prob, dtype=torch.float32)
    eligible = torch.ones_like(prob, dtype=torch.bool) if eligible is None else torch.tensor(eligible)
    entropy = -torch.log(prob.clamp_min(1e-6)) if entropy is None else torch.tensor(entropy, dtype=torch.float32)
    stats = TokenStats(torch.zeros_like(prob, dtype=torch.long), prob, prob, prob * 10, entropy)
    return RuleInput(stats=stats, eligible=eligible, step=0, num_steps=4, block_masks=eligible.sum(-1))


def test_threshold_edge_cases():
    rule = make_rule("threshold", {"tau": 0.9})
    inp = _inp([[0.5, 0.95, 0.91, 0.2],   # two above
                [0.3, 0.4, 0.1, 0.2],     # nothing above: exactly the most confident
                [0.99, 0.99, 0.99, 0.99],  # all above
                [0.1, 0.99, 0.2, 0.3]],   # one mask left (eligible only at 2)
               eligible=[[True] * 4, [True] * 4, [True] * 4, [False, False, True, False]])
    out = rule(inp).tolist()
    assert out[0] == [False, True, True, False]
    assert out[1] == [False, True, False, False]
    assert out[2] == [True] * 4
    assert out[3] == [False, False, True, False]


def test_threshold_tie_goes_to_lower_index_and_empty_row_commits_nothing():
    rule = make_rule("threshold", {"tau": 0.95})
    out = rule(_inp([[0.5, 0.5, 0.5], [0.9, 0.9, 0.9]], eligible=[[True] * 3, [False] * 3])).tolist()
    assert out == [[True, False, False], [False, False, False]]


def test_factor_rule():
    rule = make_rule("factor", {"factor": 1.0})
    # sorted: 0.9 (n=1 always), 0.7 -> (3)(0.3)=0.9 <= 1 ok, 0.6 -> 4*0.4=1.6 > 1 stop
    out = rule(_inp([[0.6, 0.9, 0.7, 0.1], [0.2, 0.1, 0.3, 0.05]])).tolist()
    assert out[0] == [False, True, True, False]
    assert out[1] == [False, False, True, False]


def test_eb_sampler():
    rule = make_rule("eb_sampler", {"gamma": 0.1})
    ent = [[0.01, 0.05, 0.5, 0.02], [1.0, 2.0, 3.0, 4.0]]
    # row 0 ascending 0.01, 0.02, 0.05, 0.5: bounds 0, .01, .03, .08 -> all 4; row 1: only 1
    out = rule(_inp([[0.9] * 4, [0.5] * 4], entropy=ent)).tolist()
    assert out[0] == [True] * 4
    assert out[1] == [True, False, False, False]


def test_entropy_threshold():
    rule = make_rule("entropy_threshold", {"tau": 0.5})
    out = rule(_inp([[0.9] * 3, [0.5] * 3], entropy=[[0.1, 0.6, 0.4], [0.9, 0.7, 0.8]])).tolist()
    assert out == [[True, False, True], [False, True, False]]


def test_learn2pd_filter_accepts_on_top_of_floor(tmp_path):
    f = ConfidenceFilter(3)
    with torch.no_grad():
        f.net[0].weight.copy_(torch.eye(3))
        f.net[0].bias.zero_()
        f.net[2].weight.copy_(torch.eye(3) * 20)
        f.net[2].bias.fill_(-10)  # score = 20 c - 10: accept c > ~0.66
    f.save(tmp_path)
    rule = make_rule("learn2pd", {"filter": str(tmp_path), "tau": 0.9})
    out = rule(_inp([[0.9, 0.1, 0.8], [0.2, 0.3, 0.1]])).tolist()
    assert out == [[True, False, True], [False, True, False]]
    with pytest.raises(ValueError, match="set block_length"):
        rule(_inp([[0.9, 0.1]]))


def test_learn2pd_needs_a_filter():
    with pytest.raises(ValueError, match="filter=DIR"):
        make_rule("learn2pd", {})


def test_sched_schedules_are_non_increasing():
    for schedule in ("linear", "cosine", "exp"):
        values = [sched_threshold(p / 10, schedule, 7.5, 2.5, 4) for p in range(11)]
        assert values[0] == pytest.approx(7.5 if schedule != "exp" else 7.5)
        assert all(a >= b for a, b in zip(values, values[1:]))
        assert values[-1] == pytest.approx(2.5 if schedule != "exp" else 2.5 + 5 * math.exp(-4))
    assert [prophet_threshold(p) for p in (0.1, 0.5, 0.9)] == [7.5, 5.0, 2.5]
    with pytest.raises(ValueError, match="unknown SchED schedule"):
        sched_threshold(0.5, "step", 7.5, 2.5, 4)
