"""The rule options behind the official block-diffusion loops, on hand-built statistics:
``schedule="block"`` (quota from the window length, not the masks left), ``low_confidence``'s
``tau`` (strictly above, with the quota as floor), ``sequential``, and ``eb_sampler``'s
``bound="sum"`` (SDAR's entropy_bounded)."""
from __future__ import annotations

import pytest
import torch

from dllm.kernels import TokenStats
from dllm.samplers import RuleInput, make_rule
from dllm.validation import OptionTypeError


def _inp(prob, eligible, *, step=0, num_steps=2, entropy=None) -> RuleInput:
    prob = torch.tensor(prob, dtype=torch.float32)
    eligible = torch.tensor(eligible)
    entropy = -torch.log(prob) if entropy is None else torch.tensor(entropy, dtype=torch.float32)
    stats = TokenStats(torch.zeros_like(prob, dtype=torch.long), prob, prob, prob * 10, entropy)
    return RuleInput(stats=stats, eligible=eligible, step=step, num_steps=num_steps, block_masks=eligible.sum(-1))


# a window of 4 whose first position is decided (a prompt tail), and a whole one
PROB = [[0.9, 0.2, 0.5, 0.4], [0.3, 0.2, 0.5, 0.4]]
ELIGIBLE = [[False, True, True, True], [True, True, True, True]]


def test_block_schedule_divides_the_window_length():
    masks = make_rule("low_confidence")(_inp(PROB, ELIGIBLE)).tolist()
    block = make_rule("low_confidence", {"schedule": "block"})(_inp(PROB, ELIGIBLE)).tolist()
    # 3 masks over 2 steps: 2 then 1; the window's 4 over 2 steps: 2 and 2
    assert masks == [[False, False, True, True], [False, False, True, True]]
    assert block == masks
    masks1 = make_rule("low_confidence")(_inp(PROB, ELIGIBLE, step=1)).tolist()
    block1 = make_rule("low_confidence", {"schedule": "block"})(_inp(PROB, ELIGIBLE, step=1)).tolist()
    assert masks1[0] == [False, False, True, False] and block1[0] == [False, False, True, True]
    assert masks1[1] == block1[1] == [False, False, True, True]  # a whole window: the same quota
    # a quota above the masks left takes them all, never a decided position
    one = make_rule("low_confidence", {"schedule": "block"})(_inp([[0.9, 0.2, 0.5, 0.4]], [[False, False, True, False]]))
    assert one.tolist() == [[False, False, True, False]]


def test_low_confidence_tau_is_strict_and_the_quota_is_its_floor():
    rule = make_rule("low_confidence", {"schedule": "block", "tau": 0.4})
    prob = [[0.45, 0.41, 0.5, 0.4], [0.1, 0.2, 0.5, 0.3]]
    out = rule(_inp(prob, [[True] * 4] * 2, num_steps=4)).tolist()
    assert out[0] == [True, True, True, False]  # three above 0.4 (>= quota 1): all of them; 0.4 is not above
    assert out[1] == [False, False, True, False]  # none above: the quota's most probable
    few = make_rule("low_confidence", {"schedule": "block", "tau": 0.45})(_inp(prob, [[True] * 4] * 2))
    assert few.tolist()[0] == [True, False, True, False]  # one above, quota 2: the top two


def test_sequential_takes_the_leftmost_masks():
    out = make_rule("sequential", {"schedule": "block"})(_inp(PROB, [[False, True, False, True], [True] * 4]))
    assert out.tolist() == [[False, True, False, True], [True, True, False, False]]
    masks = make_rule("sequential")(_inp(PROB, [[False, False, True, True], [True] * 4], num_steps=4)).tolist()
    assert masks == [[False, False, True, False], [True, False, False, False]]  # 2 / 4 masks over 4 steps: 1 each


def test_eb_sampler_sum_bound():
    ent = [[0.125, 0.25, 0.0625, 3.0], [1.0, 2.0, 3.0, 4.0], [0.125, 0.125, 0.25, 0.0625]]
    eligible = [[True] * 4, [True] * 4, [True, True, True, False]]
    inp = _inp([[0.5] * 4] * 3, eligible, entropy=ent)
    total = make_rule("eb_sampler", {"gamma": 0.4375, "bound": "sum"})(inp).tolist()
    excess = make_rule("eb_sampler", {"gamma": 0.4375})(inp).tolist()
    # ascending 0.0625, 0.125, 0.25, 3: sums 0.0625, 0.1875, 0.4375 (not < 0.4375), 3.4375
    assert total[0] == [True, False, True, False]
    assert excess[0] == [True] * 4  # sum - max: 0, 0.0625, 0.1875, 0.4375 <= 0.4375
    assert total[1] == excess[1] == [True, False, False, False]  # nothing under the bound: one
    assert total[2] == [True, True, False, False]  # the decided 0.0625 does not count; ties: lower index


@pytest.mark.parametrize("name,options,match", [
    ("low_confidence", {"schedule": "window"}, "schedule"),
    ("sequential", {"schedule": 4}, "schedule"),
    ("eb_sampler", {"bound": "max"}, "bound"),
    ("low_confidence", {"tau": 1.5}, r"\[0, 1\]"),
])
def test_bad_options_are_refused(name, options, match):
    with pytest.raises((ValueError, OptionTypeError), match=match):
        make_rule(name, options)
