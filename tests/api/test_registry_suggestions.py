"""A misspelt rule, strategy, stopper or cache name, or a misspelt option of a rule or a cache, given
to the Python API is named with the nearest known one, as the CLI's flags already were: the message
was the list of names alone (for cache_args, Python's "unexpected keyword argument" of a class)."""
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


@pytest.mark.parametrize("name, options, expected", [
    ("dual", {"refresh_evry": 2}, "cache 'dual' has no option(s) ['refresh_evry'] (did you mean 'refresh_every'?); "
                                  "its cache_args: ['first_token', 'refresh_every']"),
    ("adaptive", {"covr": 0.5}, "cache 'adaptive' has no option(s) ['covr'] (did you mean 'cover'?); its cache_args: "
                                "['cover', 'drift', 'from_layer', 'most', 'prompt_every', 'ratio', 'response_every', "
                                "'scope', 'select']"),
    ("none", {"refresh_every": 2}, "cache 'none' has no option(s) ['refresh_every']; its cache_args: []"),
])
def test_a_misspelt_cache_option_is_named_with_the_mode_s_options(name, options, expected):
    with pytest.raises(ValueError) as err:
        make_cache(name, block_length=8, **options)
    assert str(err.value) == expected


def test_the_engine_s_options_and_the_mode_s_own_still_build_it():
    assert type(make_cache("dual", block_length=8, sub_block_length=4, refresh_every=2, first_token="argmax")).__name__ == "BlockCache"
    assert type(make_cache("adaptive", block_length=8, cover=0.5)).__name__ == "AdaptiveCache"


def test_a_mode_registered_without_cache_args_takes_what_its_factory_takes(monkeypatch):
    """A bench's or a user's own mode (bench/kv_drift_probe.py's, on BlockCache) declares no
    cache_args: its factory's options reach it, and its factory still refuses the others."""
    from dllm.cache.base import CACHE_ARGS, CACHES, register_cache
    from dllm.cache.block import BlockCache

    monkeypatch.setitem(CACHES, "own_dual", None)
    monkeypatch.setitem(CACHE_ARGS, "own_dual", None)
    register_cache("own_dual")(lambda **options: BlockCache("dual", **options))
    assert make_cache("own_dual", block_length=8, refresh_every=2).refresh_every == 2
    with pytest.raises(ValueError, match="unexpected keyword argument 'refresh_evry'"):
        make_cache("own_dual", block_length=8, refresh_evry=2)
