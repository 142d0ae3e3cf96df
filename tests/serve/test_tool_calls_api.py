"""generate(tools=, tool_choice=): the same calls as the server's for the same seed and config,
"none" the same text as no tools, and what cannot be honoured refused before any forward."""
from __future__ import annotations

import json

import jsonschema
import openai
import pytest

import dllm
from dllm.serve.requests import ServerDefaults
from serve_helpers import served_model
from test_tool_calls import ASK, CITY, DAYS, FORECAST, SCHEMAS, WEATHER

NAMED = {"type": "function", "function": {"name": "forecast"}}


@pytest.fixture(scope="module")
def tiny(tiny_dirs):
    return dllm.load(tiny_dirs["llada"], dtype="float32")


def test_generate_gives_the_servers_calls(tiny):
    """One config both ways (a 64-token answer in blocks of 32, the server's block): the API's text
    and calls are the served message's, for a named call and for required ones over a ragged batch."""
    other = [{"role": "user", "content": "And the forecast for the next days, please?"}]
    api_named = tiny.generate([ASK, other], tools=[WEATHER, FORECAST], tool_choice=NAMED, seeds=[3, 4],
                              max_tokens=64, block_length=32)
    api_required = tiny.generate([ASK, other], tools=[WEATHER, FORECAST], tool_choice="required", seeds=[5, 6],
                                 max_tokens=64, block_length=32)
    with served_model(tiny, ServerDefaults()) as (_, url):
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        for api, choice, seeds in ((api_named, NAMED, (3, 4)), (api_required, "required", (5, 6))):
            for row, (messages, seed) in enumerate(zip((ASK, other), seeds)):
                served = client.chat.completions.create(model="m", messages=messages, tools=[WEATHER, FORECAST],
                                                        tool_choice=choice, seed=seed, max_tokens=64).choices[0]
                assert [(c.function.name, c.function.arguments) for c in served.message.tool_calls] == \
                    [(c.name, c.arguments) for c in api.tool_calls[row]]
                for call in api.tool_calls[row]:
                    jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
    assert all(call.name == "forecast" for calls in api_named.tool_calls for call in calls)
    jsonschema.validate(json.loads(api_named.tool_calls[0][0].arguments), DAYS)


def test_tool_choice_none_answers_as_without_tools(tiny):
    plain = tiny.generate(ASK, seeds=[2], max_tokens=16)
    none = tiny.generate(ASK, tools=[WEATHER], tool_choice="none", seeds=[2], max_tokens=16)
    assert none.texts == plain.texts and none.tool_calls == [[]] and plain.tool_calls is None


@pytest.mark.parametrize("kwargs,match", [
    ({"tools": [WEATHER]}, "auto"),  # the tiny template ignores tools
    ({"tools": [WEATHER], "tool_choice": "required", "json_schema": CITY}, "give one"),
    ({"tools": [WEATHER], "tool_choice": NAMED}, "not one of the tools"),
    ({"tools": [WEATHER], "tool_choice": "required", "echo": True}, "drop echo"),
    ({"tools": [{"type": "function", "function": {"name": "a b"}}], "tool_choice": "required"}, "letters"),
])
def test_generate_refuses_tool_requests_before_any_forward(tiny, kwargs, match):
    forward = tiny.model.forward
    calls = []
    tiny.model.forward = lambda *a, **k: calls.append(1) or forward(*a, **k)
    try:
        with pytest.raises(ValueError, match=match):
            tiny.generate(ASK, max_tokens=8, **kwargs)
        assert calls == []
    finally:
        del tiny.model.forward


def test_tools_with_a_plain_prompt_are_refused(tiny):
    """chat=False reads the prompt as it is, so the tools could never be shown."""
    with pytest.raises(ValueError, match="through its chat template"):
        tiny.generate("Weather in Paris?", chat=False, tools=[WEATHER], tool_choice="required", max_tokens=8)


def test_stream_ends_with_generates_calls(tiny):
    """stream(tools=...) decodes as generate does and its last update reads the same calls."""
    asked = dict(tools=[WEATHER, FORECAST], tool_choice="required", max_tokens=48)
    whole = tiny.generate(ASK, seeds=[9], **asked)
    updates = list(tiny.stream(ASK, seed=9, **asked))
    assert updates[-1].final_text == whole.texts[0] and updates[-1].tool_calls == whole.tool_calls[0]
    assert updates[-1].tool_calls and all(u.tool_calls is None for u in updates[:-1])
