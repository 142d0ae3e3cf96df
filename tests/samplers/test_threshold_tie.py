"""Every rule with a tau, at the tie: a statistic exactly equal to tau (issue 44). Each rule's
comparison is the one of the official loop it follows, so ``>=`` against ``>`` is pinned here:

- ``threshold`` (and its pipelined ``passes``): at least tau, Fast-dLLM's LLaDA
  ``get_transfer_index`` and its Dream block loop (they drop confidence < threshold;
  tests/oracles.py ``fastdllm_dream_generate``). Fast-dLLM v2's ``batch_sample`` takes
  confidence > threshold (``fastdllm_v2_batch_sample``): the two differ only at this exact tie.
- ``threshold`` with ``budget_cap``: at least tau within the step's cap, Dream's
  ``alg="confidence_threshold"`` (it rejects chosen < threshold; ``dream_threshold_generate``).
- ``low_confidence`` with ``tau`` (and ``passes``): strictly above, LLaDA2.0's ``generate`` and
  SDAR's ``low_confidence_dynamic``.
- ``entropy_threshold`` (and ``passes``): entropy at most tau, dParallel's ``generate``.
- ``learn2pd``: sigmoid(filter score) strictly above tau, Learning-to-Parallel-Decoding.

The window: position 0 sits exactly at tau, position 1 clears it (it is also every rule's
one-token floor), position 2 misses it."""
from __future__ import annotations

import pytest
import torch

from dllm.kernels import TokenStats
from dllm.samplers import RuleInput, make_rule
from dllm.samplers.rules.learn2pd import ConfidenceFilter

TAU = 0.75  # exact in float32 and float64: the tie is a real tie
TIE, ABOVE, BELOW = [True, False, False], [False, True, False], [False, False, True]


def _inp(prob: list[float], entropy: list[float] | None = None) -> RuleInput:
    """One row of three masked positions; a quota of one per step (three masks, three steps)."""
    p = torch.tensor([prob], dtype=torch.float32)
    ent = -torch.log(p) if entropy is None else torch.tensor([entropy], dtype=torch.float32)
    stats = TokenStats(torch.zeros_like(p, dtype=torch.long), p, p, p * 10, ent)
    eligible = torch.ones_like(p, dtype=torch.bool)
    return RuleInput(stats=stats, eligible=eligible, step=0, num_steps=3, block_masks=eligible.sum(-1))


CONFIDENCE = _inp([TAU, 0.8, 0.5])


def _or(*masks: list[bool]) -> list[list[bool]]:
    return [[any(m[i] for m in masks) for i in range(3)]]


@pytest.mark.parametrize("name,args,method,want", [
    ("threshold", {"tau": TAU}, "__call__", _or(TIE, ABOVE)),  # Fast-dLLM v1: >=
    ("threshold", {"tau": TAU}, "passes", _or(TIE, ABOVE)),
    ("threshold", {"tau": TAU, "budget_cap": True}, "__call__", _or(TIE, ABOVE)),  # Dream: >=
    ("low_confidence", {"tau": TAU}, "__call__", _or(ABOVE)),  # LLaDA2.0: >
    ("low_confidence", {"tau": TAU}, "passes", _or(ABOVE)),
])
def test_confidence_rules_at_the_tie(name, args, method, want):
    inp = CONFIDENCE
    if args.get("budget_cap"):  # a cap of all three masks in one step, so only tau decides
        inp = RuleInput(stats=inp.stats, eligible=inp.eligible, step=0, num_steps=1, block_masks=inp.block_masks)
    rule = make_rule(name, args)
    assert getattr(rule, method)(inp).tolist() == want


@pytest.mark.parametrize("method", ["__call__", "passes"])
def test_entropy_threshold_at_the_tie(method):
    inp = _inp([0.5, 0.9, 0.2], entropy=[TAU, 0.2, 1.5])  # dParallel: entropy <= tau
    rule = make_rule("entropy_threshold", {"tau": TAU})
    assert getattr(rule, method)(inp).tolist() == _or(TIE, ABOVE)


def test_learn2pd_at_the_tie(tmp_path):
    """An identity filter whose score is 20 c - 10: confidence 0.5 scores 0, sigmoid 0.5 = tau."""
    f = ConfidenceFilter(3)
    with torch.no_grad():
        f.net[0].weight.copy_(torch.eye(3))
        f.net[0].bias.zero_()
        f.net[2].weight.copy_(torch.eye(3) * 20)
        f.net[2].bias.fill_(-10)
    f.save(tmp_path)
    rule = make_rule("learn2pd", {"filter": str(tmp_path), "tau": 0.5})
    # position 0 ties (sigmoid 0.5), 1 is the floor, 2 passes (sigmoid(6) > 0.5): Learn2PD's >
    out = rule(_inp([0.5, 0.9, 0.8])).tolist()
    assert out == [[False, True, True]]


def test_factor_at_the_tie():
    """``factor``: (n + 1)(1 - c(n)) <= f, Fast-dLLM's get_transfer_index_dynamic. With f = 0.75
    the second most confident (0.75) ties, 3 x 0.25 = 0.75 exactly, and is committed with the
    first; the third (0.5: 4 x 0.5 = 2) is not."""
    rule = make_rule("factor", {"factor": 0.75})
    assert rule(_inp([0.75, 0.9, 0.5])).tolist() == _or(TIE, ABOVE)
