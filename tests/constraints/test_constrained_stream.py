"""DiffusionLM.stream under a constraint: the same tokens and text as generate (plain and FreeDave),
every update's final text a prefix of the last, and the last a word of the language."""
from __future__ import annotations

import pytest

from dllm.samplers.constraints import json_answer_errors

NAMES = {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 4}


@pytest.mark.parametrize("options", [dict(temperature=0.8, seed=3),
                                     dict(strategy="freedave", steps=32, block_length=8)], ids=["sampled", "freedave"])
def test_stream_is_generate_under_a_constraint(tiny_models, options):
    lm = tiny_models["llada"]
    updates = list(lm.stream("hi there", chat=False, max_tokens=32, json_schema=NAMES, **options))
    last = updates[-1]
    assert last.finished and json_answer_errors(last.final_text, NAMES) is None, last.final_text
    assert all(last.final_text.startswith(u.final_text) for u in updates)
    assert "".join(u.text_delta for u in updates) == last.final_text
    out = lm.generate("hi there", chat=False, max_tokens=32, json_schema=NAMES, **options)
    assert last.final_text == out.texts[0] and last.final_ids == out.token_ids[0]


def test_stream_refuses_what_generate_refuses(tiny_models):
    with pytest.raises(ValueError, match="drop the stops"):
        tiny_models["llada"].stream("hi", json_schema=NAMES, stop="]")
    with pytest.raises(ValueError, match="give one of"):
        tiny_models["llada"].stream("hi", json_schema=NAMES, regex="a+")
