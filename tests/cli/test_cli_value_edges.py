"""The command line's values at their edges: argparse types take their least value and refuse the
one below; a prompt whose tokens and answer canvas fill the context exactly is decoded."""
from __future__ import annotations

import argparse

import pytest

import dllm
from dllm.cli.options import non_negative_int, positive_float, positive_int
from dllm.cli.prompts import PromptLine, check_prompt_lengths
from dllm.engine.config import GenerationConfig


@pytest.mark.parametrize("kind, least, below", [(positive_int, "1", "0"), (non_negative_int, "0", "-1"),
                                                (positive_float, "1e-9", "0")])
def test_each_type_takes_its_least_value_and_refuses_the_one_below(kind, least, below):
    assert kind(least) == type(kind(least))(least)
    with pytest.raises(argparse.ArgumentTypeError, match=f"must be .*, got {below}"):
        kind(below)


def test_a_prompt_and_canvas_that_fill_the_context_exactly_are_taken():
    lm = dllm.load()
    context = lm.model.config.max_sequence_length
    line = PromptLine("prompts.txt", 3, "Copy: Ann Lee")
    tokens = len(lm.encode(line.prompt, True))
    assert check_prompt_lengths(lm, [line], GenerationConfig(gen_length=context - tokens), True) == [
        lm.encode(line.prompt, True)]
    with pytest.raises(ValueError, match=f"prompts.txt line 3: the prompt has {tokens} tokens .* > the model's context"):
        check_prompt_lengths(lm, [line], GenerationConfig(gen_length=context - tokens + 1), True)
