"""A misspelt rule, strategy, stopper or cache name, or a misspelt option of a rule, given to the
Python API is named with the nearest known one, as the CLI's flags already were: the message was
the list of names alone."""
from __future__ import annotations

import pytest

from dllm.cache import make_cache
from dllm.samplers.base import make_rule, make_stopper, make_strategy


@pytest.mark.parametrize("make, name, expected", [
    (make_rule, "thresold", "unknown unmasking rule 'thresold' (did you mean 'threshold'?); known: ["),
    (make_strategy, "freedav", "unknown decoding strategy 'freedav' (did you mean 'freedave'?); known: ["),
    (make_stopper, "shed", "unknown stopping criterion 'shed' (did you mean 'sched'?); known: ["),
    (make_cache, "dualx", "unknown cache 'dualx' (did you mean 'dual'?); known caches: ["),
    (make_rule, "zzzzzz", "unknown unmasking rule 'zzzzzz'; known: ["),  # a far miss: no guess
])
def test_a_misspelt_name_is_named_with_the_nearest(make, name, expected):
    with pytest.raises(ValueError) as err:
        make(name)
    assert str(err.value).startswith(expected), err.value


def test_a_misspelt_option_is_named_with_the_nearest():
    with pytest.raises(ValueError) as err:
        make_rule("threshold", {"taw": 0.9})
    assert str(err.value) == ("unmasking rule 'threshold' has no option(s) ['taw'] (did you mean 'tau'?); "
                              "its options: ['budget_cap', 'tau']")
