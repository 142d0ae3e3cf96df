"""``low_confidence`` with ``tau`` and ``rank="neg_entropy"`` (LoPA's released D2F loop): a step
commits the positions strictly above tau when they are at least the quota, all of them and only
them; when they fall short, the quota's lowest-entropy positions instead, whether or not those
clear tau. Here the lowest-entropy positions are never the most probable, so a union of the two
sets, or a quota met only when exceeded, commits different positions."""
from __future__ import annotations

import torch

from dllm.kernels import TokenStats
from dllm.samplers import RuleInput, make_rule

TAU = 0.8
# one row per case, four masked positions, a quota of 2 (4 masks over 2 steps, step 0)
PROB = [[0.95, 0.90, 0.92, 0.30],  # three above tau, more than the quota
        [0.95, 0.90, 0.30, 0.20],  # two above tau, exactly the quota
        [0.95, 0.30, 0.20, 0.10]]  # one above tau, short of the quota
ENTROPY = [[1.0, 1.2, 1.1, 0.1],
           [1.0, 1.2, 0.1, 0.2],
           [1.0, 0.5, 0.1, 0.2]]
WANT = [[True, True, True, False],  # the positions above tau
        [True, True, False, False],  # the positions above tau
        [False, False, True, True]]  # the two lowest entropies, position 0's clearing tau aside


def _inp(rows: list[int]) -> RuleInput:
    p = torch.tensor([PROB[r] for r in rows])
    ent = torch.tensor([ENTROPY[r] for r in rows])
    stats = TokenStats(torch.zeros_like(p, dtype=torch.long), p, p, p * 10, ent)
    eligible = torch.ones_like(p, dtype=torch.bool)
    return RuleInput(stats=stats, eligible=eligible, step=0, num_steps=2, block_masks=eligible.sum(-1))


def test_above_tau_when_enough_else_the_quota_by_entropy():
    rule = make_rule("low_confidence", {"tau": TAU, "rank": "neg_entropy"})
    assert rule(_inp([0, 1, 2])).tolist() == WANT
    for r in range(3):  # each row alone decides as in the batch
        assert rule(_inp([r])).tolist() == [WANT[r]]


def test_by_probability_the_quota_and_every_position_above_tau():
    """rank="prob" (LLaDA2.0): the quota's most probable include every position above tau."""
    rule = make_rule("low_confidence", {"tau": TAU})
    assert rule(_inp([0, 1, 2])).tolist() == [[True, True, True, False], [True, True, False, False],
                                             [True, True, False, False]]
