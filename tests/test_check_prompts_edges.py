"""The engine's prompt check before any model work: an empty prompt is refused naming its row, and
a prompt whose tokens and answer canvas fill the context exactly is taken."""
from __future__ import annotations

import pytest

from dllm.engine.config import GenerationConfig
from dllm.engine.decoding import check_prompts


def test_an_empty_prompt_is_refused_naming_its_row():
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        check_prompts([[5, 6], []], GenerationConfig(gen_length=8), 64)


def test_a_prompt_that_fills_the_context_exactly_is_taken():
    config = GenerationConfig(gen_length=8)
    check_prompts([[5] * 56], config, 64)
    with pytest.raises(ValueError, match="prompt 0 has 57 tokens \\+ gen_length 8 = 65 > the model's context of 64"):
        check_prompts([[5] * 57], config, 64)
