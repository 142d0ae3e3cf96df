"""Policy options are checked against the option's declared type before any model work: the
error names the policy, the option, the expected type and the value given."""
from __future__ import annotations

from typing import Any

import pytest

from dllm.samplers import make_rule, make_stopper, make_strategy
from dllm.samplers.base import RULES, STOPPERS, STRATEGIES
from dllm.validation import OptionTypeError, field_types


@pytest.mark.parametrize("make,name,options,match", [
    (make_rule, "threshold", {"tau": "high"}, r"unmasking rule 'threshold' option 'tau' expects float, got 'high' \(str\)"),
    (make_rule, "threshold", {"tau": float("nan")}, r"unmasking rule 'threshold' option 'tau' must be a finite number, got nan"),
    (make_rule, "factor", {"factor": True}, r"option 'factor' expects float, got True \(bool\)"),
    (make_strategy, "freedave", {"num_drafts": 2.5}, r"decoding strategy 'freedave' option 'num_drafts' expects int, got 2.5 \(float\)"),
    (make_strategy, "lopa", {"branches": "3"}, r"option 'branches' expects int, got '3' \(str\)"),
    (make_strategy, "lopa", {"confidence": 1}, r"option 'confidence' expects str, got 1 \(int\)"),
    (make_stopper, "prophet", {"length": "5"}, r"stopping criterion 'prophet' option 'length' expects int or None, got '5'"),
    (make_stopper, "prophet", {"thresholds": [7.5, 5.0]}, r"option 'thresholds' expects a list of 3 float, got \[7.5, 5.0\]"),
    (make_stopper, "sched", {"tau_high": "7"}, r"stopping criterion 'sched' option 'tau_high' expects float"),
    (make_rule, "threshold", [("tau", 0.5)], r"options of unmasking rule 'threshold' must be a dict"),
])
def test_wrong_typed_options_are_named(make, name, options, match):
    with pytest.raises(OptionTypeError, match=match):
        make(name, options)


def test_wrong_typed_option_is_a_value_error_for_the_cli(tiny_models):
    """The CLI reports ValueErrors as one line; a wrong type reaches it as one too."""
    with pytest.raises(ValueError, match="option 'tau' expects float, got 'high'"):
        tiny_models["llada"].generate("hi", gen_length=8, policy="threshold", policy_args={"tau": "high"})


def test_well_typed_options_are_converted_to_the_declared_type():
    assert make_rule("threshold", {"tau": 1}).tau == 1.0 and isinstance(make_rule("threshold", {"tau": 1}).tau, float)
    assert make_stopper("prophet", {"thresholds": [7, 5, 2]}).thresholds == (7.0, 5.0, 2.0)
    assert make_strategy("freedave", {"num_drafts": 3}).num_drafts == 3


@pytest.mark.parametrize("table", [RULES, STRATEGIES, STOPPERS], ids=["rules", "strategies", "stoppers"])
def test_every_registered_option_has_a_resolvable_type(table):
    """An annotation the checker cannot resolve would silently skip the check."""
    for name, cls in table.items():
        for option, annotation in field_types(cls).items():
            assert annotation is not Any, (name, option)
