"""What a generate call's output options accept (``OutputRequest.parse``) and how ``merge_config``
follows a new answer length: a bool is no count or token id, max_tokens is positive, and a
config of one token per step stays one token per step at the new length."""
from __future__ import annotations

import pytest

from dllm import GenerationConfig
from dllm.api.request import OutputRequest, merge_config
from dllm.api.stops import StopConditions
from dllm.validation import OptionTypeError


def test_bools_are_refused_where_ints_are_asked():
    """True is an int to Python; as a stop id or an alternatives count it is a mistake."""
    with pytest.raises(OptionTypeError, match="stop_token_ids must be ints, got True"):
        StopConditions.parse(None, [5, True])
    with pytest.raises(OptionTypeError, match="logprobs must be an int"):
        OutputRequest.parse(logprobs=True)
    with pytest.raises(OptionTypeError, match="max_tokens must be a positive int"):
        OutputRequest.parse(max_tokens=True)
    assert OutputRequest.parse(logprobs=0, stop_token_ids=[0]).logprobs == 0  # 0 is a count


def test_max_tokens_is_at_least_one():
    with pytest.raises(ValueError, match="max_tokens must be a positive int, got 0"):
        OutputRequest.parse(max_tokens=0)
    assert OutputRequest.parse(max_tokens=1).max_tokens == 1


def test_one_token_per_step_follows_the_answer_length():
    one_per_step = GenerationConfig(gen_length=16, block_length=4)
    assert one_per_step.steps == 16
    assert merge_config(one_per_step, {}, max_tokens=8).steps == 8
    assert merge_config(one_per_step, {"gen_length": 32}).steps == 32
    budget = GenerationConfig(gen_length=16, block_length=4, steps=8)  # a budget of its own is kept
    assert merge_config(budget, {"gen_length": 32}).steps == 8
