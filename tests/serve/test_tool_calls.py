"""Tool calling on /v1/chat/completions: a named function or ``required`` decodes the answer as a
call (arguments valid under the tool's schema, whatever the model), ``auto`` reads Hermes'
``<tool_call>`` blocks from a template that shows the tools, streamed deltas join to the whole
message, tool turns reach the template, and what cannot be honoured is a 400 before any decode."""
from __future__ import annotations

import json
import re
from itertools import combinations

import jsonschema
import openai
import pytest

import dllm
from dllm.api.tools import ToolError, parse_tool_choice
from dllm.serve.requests import RequestError, ServerDefaults, parse_request
from dllm.serve.responses import ResponseWriter
from dllm.serve.tool_stream import ToolStream, finish_reason
from serve_helpers import served_model

CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 6}}, "required": ["city"],
        "additionalProperties": False}
DAYS = {"type": "object", "properties": {"days": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["days"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "weather", "description": "today's weather", "parameters": CITY}}
FORECAST = {"type": "function", "function": {"name": "forecast", "parameters": DAYS}}
SCHEMAS = {"weather": CITY, "forecast": DAYS}
ASK = [{"role": "user", "content": "Weather in Paris?"}]
# a Hermes-form template of this test's own: tools listed, calls written as <tool_call>{...}</tool_call>
HERMES_TEMPLATE = (
    "{% if tools %}<|system|>You may call: {% for t in tools %}{{ t | tojson }}{% endfor %}. Write "
    '<tool_call>{"name": ..., "arguments": {...}}</tool_call>{% endif %}'
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% if m.tool_calls %}{% for c in m.tool_calls %}"
    '<tool_call>{{ {"name": c.function.name, "arguments": c.function.arguments} | tojson }}</tool_call>'
    "{% endfor %}{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="module")
def tiny(tiny_dirs):
    return dllm.load(tiny_dirs["llada"], dtype="float32")


@pytest.fixture(scope="module")
def hermes(tiny_dirs):
    """The tiny model with a chat template that shows tools in Hermes' form."""
    model = dllm.load(tiny_dirs["llada"], dtype="float32")
    model.tokenizer.chat_template = HERMES_TEMPLATE
    return model


def parse(model, **body):
    return parse_request({"messages": ASK, "max_tokens": 64, **body}, model, ServerDefaults(), chat=True,
                         served_name="m")


# ---- reading answers back, and the stream that gives the same message ----

AUTO = parse_tool_choice([WEATHER, FORECAST], "auto")
REQUIRED = parse_tool_choice([WEATHER, FORECAST], "required")
NAMED = parse_tool_choice([WEATHER, FORECAST], {"type": "function", "function": {"name": "forecast"}})
NONE = parse_tool_choice([WEATHER, FORECAST], "none")
CALLS = '[{"name": "weather", "arguments": {"city": "Paris"}}, {"name": "forecast", "arguments": {"days": 3}}]'
HERMES_ANSWER = ('Let me look.\n<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
                 '<tool_call>{"name": "forecast", "arguments": {"days": 2}}</tool_call>')


@pytest.mark.parametrize("choice,text,content,calls", [
    (REQUIRED, CALLS, None, [("weather", {"city": "Paris"}), ("forecast", {"days": 3})]),
    (REQUIRED, CALLS[:30], CALLS[:30], []),  # cut short: no call, the text as content
    (NAMED, '{"days": 4}', None, [("forecast", {"days": 4})]),
    (REQUIRED, '[{"name": "weather", "arguments": "Paris"}]', '[{"name": "weather", "arguments": "Paris"}]', []),
    (AUTO, HERMES_ANSWER, "Let me look.\n", [("weather", {"city": "Paris"}), ("forecast", {"days": 2})]),
    (AUTO, "  \n" + HERMES_ANSWER[13:], None, [("weather", {"city": "Paris"}), ("forecast", {"days": 2})]),
    (AUTO, "It is sunny.", "It is sunny.", []),
    (AUTO, HERMES_ANSWER.replace('"forecast"', '"unknown"'), HERMES_ANSWER.replace('"forecast"', '"unknown"'), []),
    (AUTO, HERMES_ANSWER[:-len("</tool_call>")], HERMES_ANSWER[:-len("</tool_call>")], []),  # one block unclosed
    (NONE, HERMES_ANSWER, HERMES_ANSWER, []),
])
def test_answers_read_back_as_content_and_calls(choice, text, content, calls):
    got_content, got_calls = choice.read(text)
    assert got_content == content
    assert [(c.name, json.loads(c.arguments)) for c in got_calls] == calls


def test_auto_with_parallel_tool_calls_false_keeps_the_first_call():
    """parallel_tool_calls false allows one call; a Hermes model that writes two has its first
    read (vLLM keeps the first too), in the whole message and the streamed one alike."""
    single = parse_tool_choice([WEATHER, FORECAST], "auto", parallel_tool_calls=False)
    content, calls = single.read(HERMES_ANSWER)
    assert content == "Let me look.\n"
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("weather", {"city": "Paris"})]
    stream = ToolStream(single)
    deltas = stream.feed(HERMES_ANSWER) + stream.finish()
    assert _joined(deltas) == ("Let me look.\n", [("weather", '{"city": "Paris"}')]) and stream.calls == 1


def test_an_answer_cut_at_max_tokens_ends_length_after_whole_calls():
    """Calls read from an answer that ran out of tokens (whole Hermes blocks, then cut text) keep
    finish_reason "length", whole and streamed: the client learns the answer was cut; "tool_calls"
    is for an answer the model ended itself."""
    text = HERMES_ANSWER + "\nThen I"
    slot = {"finish_reason": "length"}
    message = ResponseWriter(True, "m", "x", 0, tools=AUTO)._message(text, slot)
    assert len(message["tool_calls"]) == 2 and slot["finish_reason"] == "length"
    stream = ToolStream(AUTO)
    stream.feed(text), stream.finish()
    assert stream.calls == 2 and finish_reason(AUTO, stream.calls, "length") == "length"
    assert finish_reason(AUTO, 2, "stop") == "tool_calls"


@pytest.mark.parametrize("parameters,words,not_words", [
    ({}, ["{}"], ["[]", '"a"', "1", '{"a": 1}']),  # {}: a tool of no arguments, as left out
    ({"description": "no type"}, ["{}"], ["[]", '"a"', "null"]),
    ({"properties": {"x": {"type": "integer"}}, "required": ["x"]}, ['{"x": 1}'], ["[1]", "1"]),
])
def test_forced_arguments_are_an_object_when_parameters_give_no_type(parameters, words, not_words):
    """OpenAI's arguments are a JSON object; a schema without "type" (``{}``, as clients send for a
    tool without arguments) must not let the named call's arguments, or a required call's, be
    another JSON value (a required answer whose arguments are not an object reads as no call)."""
    from dllm.samplers.constraints.spec import ConstraintSpec

    tool = {"type": "function", "function": {"name": "ping", "parameters": parameters}}
    for mode, wrap in (({"type": "function", "function": {"name": "ping"}}, "{}"),
                       ("required", '[{{"name": "ping", "arguments": {}}}]')):
        regex = ConstraintSpec.parse(json_schema=parse_tool_choice([tool], mode).schema()).to_regex()
        for word in words:
            assert re.fullmatch(regex, wrap.format(word)), (mode, word)
        for word in not_words:
            assert not re.fullmatch(regex, wrap.format(word)), (mode, word)


def _joined(deltas):
    """A streamed message's deltas joined as an OpenAI client joins them."""
    content, calls = None, {}
    for delta in deltas:
        if "content" in delta:
            content = (content or "") + delta["content"]
        for call in delta.get("tool_calls", []):
            slot = calls.setdefault(call["index"], {"name": "", "arguments": ""})
            slot["name"] += call.get("function", {}).get("name", "")
            slot["arguments"] += call.get("function", {}).get("arguments", "")
    return content, [(c["name"], c["arguments"]) for _, c in sorted(calls.items())]


@pytest.mark.parametrize("choice,text", [(REQUIRED, CALLS), (REQUIRED, CALLS[:30]), (NAMED, '{"days": 4}'),
                                         (AUTO, HERMES_ANSWER), (AUTO, "Sunny <tool_c is no tag"),
                                         (AUTO, "  \n" + HERMES_ANSWER[13:]), (NONE, "Sunny.")])
def test_streamed_deltas_join_to_the_whole_message_at_every_split(choice, text):
    """Final text arrives in pieces of any size; every split into three pieces gives the message
    the whole response gives, and the finish reason after the same number of calls."""
    writer = ResponseWriter(True, "m", "x", 0, tools=choice)
    slot = {"finish_reason": "stop"}
    whole = writer._message(text, slot)
    expected = (whole["content"], [(c["function"]["name"], c["function"]["arguments"])
                                   for c in whole.get("tool_calls", [])])
    for cut1, cut2 in combinations(range(len(text) + 1), 2):
        stream = ToolStream(choice)
        deltas = stream.feed(text[:cut1]) + stream.feed(text[cut1:cut2]) + stream.feed(text[cut2:]) + stream.finish()
        assert _joined(deltas) == expected, (cut1, cut2)
        assert (stream.calls > 0) == bool(expected[1]) or choice.mode == "named"
        assert all(delta for delta in deltas)  # no empty delta goes out


def test_required_calls_keep_nested_models_definitions(tiny):
    """pydantic writes nested models under $defs with #/$defs/... references; nested in the list of
    calls they must still resolve, per tool, when two tools define the same name differently."""
    place = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 4}}, "required": ["city"],
             "additionalProperties": False}
    room = {"type": "object", "properties": {"floor": {"type": "integer", "minimum": 0, "maximum": 9}},
            "required": ["floor"], "additionalProperties": False}
    tools = [{"type": "function", "function": {"name": name, "strict": True, "parameters": {
        "type": "object", "properties": {"at": {"$ref": "#/$defs/Where"}}, "required": ["at"],
        "additionalProperties": False, "$defs": {"Where": where}}}} for name, where in (("go", place), ("up", room))]
    out = tiny.generate(ASK, tools=tools, tool_choice="required", seed=1, n=3, max_tokens=64)
    for calls in out.tool_calls:
        assert calls
        for call in calls:
            jsonschema.validate(json.loads(call.arguments), tools[call.name == "up"]["function"]["parameters"])


# ---- requests: what is refused, before any model work ----

@pytest.mark.parametrize("body,field", [
    ({"tools": [WEATHER]}, "tool_choice"),  # auto, the default, on a template that ignores tools
    ({"tools": [WEATHER], "tool_choice": "auto"}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [WEATHER, WEATHER], "tool_choice": "required"}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}], "tool_choice": "required"}, "tools"),
    ({"tools": [{"type": "retrieval"}], "tool_choice": "required"}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}],
      "tool_choice": "required"}, "tools"),
    ({"tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": "no"}, "parallel_tool_calls"),
    ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format"),
    ({"tools": [WEATHER], "tool_choice": "required", "stop": ["}"]}, "tools"),
    ({"tools": [WEATHER], "tool_choice": "required", "max_tokens": 8}, "tools"),  # no call fits in 8 tokens
])
def test_tool_requests_that_cannot_be_honoured_are_refused_on_their_field(tiny, body, field):
    with pytest.raises(RequestError) as err:
        parse(tiny, **body)
    assert err.value.param == field


def test_a_schema_a_forced_call_cannot_enforce_is_refused_naming_its_tool(tiny):
    """A required call nests every tool's parameters deep in the list of calls; the 400 (and the
    API's error) names the tool and the place in its own parameters, not the nested schema's."""
    bad = {"type": "function", "function": {"name": "pick", "parameters": {
        "type": "object", "properties": {"x": {"oneOf": [{"type": "integer"}, {"type": "number"}]}}}}}
    for choice in ("required", {"type": "function", "function": {"name": "pick"}}):
        with pytest.raises(RequestError) as err:
            parse(tiny, tools=[WEATHER, bad], tool_choice=choice)
        assert err.value.param == "tools"
        assert str(err.value).startswith("tools[1].function.parameters uses 'oneOf' at /properties/x,")
    with pytest.raises(ValueError, match=r"^tools\[1\]\.function\.parameters uses 'oneOf' at /properties/x,"):
        tiny.generate(ASK, tools=[WEATHER, bad], tool_choice="required", max_tokens=8)
    parse(tiny, tools=[WEATHER, bad], tool_choice={"type": "function", "function": {"name": "weather"}})  # not called


def test_a_forced_call_decodes_under_its_schema_and_auto_needs_a_template_that_shows_tools(tiny, hermes):
    assert parse(tiny, tools=[WEATHER], tool_choice="none").constraint is None
    assert parse(tiny, tools=[WEATHER], tool_choice="required").constraint is not None
    auto = parse(hermes, tools=[WEATHER])
    assert auto.tools.mode == "auto" and auto.constraint is None
    plain = parse(hermes)
    assert len(auto.prompt_ids[0]) > len(plain.prompt_ids[0])  # the tools are in the prompt
    assert parse(hermes, tools=[WEATHER], tool_choice="none").prompt_ids == plain.prompt_ids  # and not with none


def test_a_property_named_ref_is_a_property():
    """A property may be called "$ref" (its value a schema, not a reference to rewrite)."""
    odd = {"type": "function", "function": {"name": "odd", "parameters": {
        "type": "object", "properties": {"$ref": {"type": "string"}}, "$defs": {"x": {"type": "integer"}}}}}
    arguments = parse_tool_choice([odd], "required").schema()["items"]["anyOf"][0]["properties"]["arguments"]
    assert arguments["properties"] == {"$ref": {"type": "string"}}


def test_null_fields_of_a_function_mean_left_out(tiny):
    """Clients serialise unset optional fields as null (description, parameters, strict)."""
    tool = {"type": "function", "function": {"name": "now", "description": None, "parameters": None, "strict": None}}
    parsed = parse(tiny, tools=[tool], tool_choice="required")
    assert parsed.tools.functions == ({"name": "now", "parameters": {"type": "object", "properties": {}}},)


def test_tools_belong_to_chat():
    with pytest.raises(ToolError):
        parse_tool_choice([WEATHER], {"type": "function"})
    # the completions endpoint names where tools go
    from dllm.serve.requests import _check_fields, COMPLETION_FIELDS
    with pytest.raises(RequestError, match="chat/completions"):
        _check_fields({"prompt": "x", "tools": [WEATHER]}, COMPLETION_FIELDS, chat=False)


def test_tool_turns_reach_the_template_with_their_arguments_as_objects(hermes):
    """OpenAI sends a call's arguments as JSON text; the template writes them with tojson, so they
    must arrive as an object (else they would be quoted twice)."""
    turns = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    parsed = parse(hermes, messages=turns, tools=[WEATHER])
    prompt = hermes.tokenizer.decode(parsed.prompt_ids[0])
    assert '{"name": "weather", "arguments": {"city": "Paris"}}' in prompt and "<|tool|>sunny" in prompt
    bad = [dict(turns[1], tool_calls=[{"type": "function", "function": {"name": "weather", "arguments": "{oops"}}])]
    with pytest.raises(RequestError) as err:
        parse(hermes, messages=ASK + bad, tools=[WEATHER])
    assert err.value.param == "messages"


# ---- through the server, with the openai client ----

def test_forced_calls_through_the_openai_client_whole_and_streamed(tiny):
    with served_model(tiny, ServerDefaults(), max_batch=2) as (_, url):
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        named = client.chat.completions.create(model="m", messages=ASK, tools=[WEATHER, FORECAST], seed=3,
                                               tool_choice={"type": "function", "function": {"name": "weather"}})
        choice = named.choices[0]
        assert choice.message.content is None and choice.finish_reason == "stop"
        (call,) = choice.message.tool_calls
        assert call.function.name == "weather" and call.id.startswith("call_")
        jsonschema.validate(json.loads(call.function.arguments), CITY)

        required = client.chat.completions.create(model="m", messages=ASK, tools=[WEATHER, FORECAST], seed=5,
                                                  tool_choice="required", parallel_tool_calls=False, n=2)
        for choice in required.choices:
            assert choice.finish_reason == "tool_calls" and choice.message.content is None
            (call,) = choice.message.tool_calls  # parallel_tool_calls false: one call
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])

        for body, whole in (({"tool_choice": {"type": "function", "function": {"name": "weather"}}, "seed": 3}, named),
                            ({"tool_choice": "required", "parallel_tool_calls": False, "seed": 5, "n": 2}, required)):
            chunks = list(client.chat.completions.create(model="m", messages=ASK, tools=[WEATHER, FORECAST],
                                                         stream=True, **body))
            for index, choice in enumerate(whole.choices):
                deltas = [c.choices[0].delta.model_dump(exclude_none=True) for c in chunks
                          if c.choices and c.choices[0].index == index]
                streamed = _joined(deltas)
                assert streamed == (None, [(t.function.name, t.function.arguments) for t in choice.message.tool_calls])
                finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].index == index]
                assert finish[-1] == choice.finish_reason


def test_streamed_calls_carry_every_answer_tokens_logprobs(tiny):
    """A required call goes out at the end, but the logprobs of the tokens decoded before stay
    (not dropped with the text held back): the stream's entries are the whole response's."""
    body = dict(model="m", messages=ASK, tools=[WEATHER], tool_choice="required", seed=7, logprobs=True,
                top_logprobs=1)
    with served_model(tiny, ServerDefaults(), max_batch=2) as (_, url):
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        whole = client.chat.completions.create(**body).choices[0].logprobs.content
        chunks = list(client.chat.completions.create(stream=True, **body))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert len(whole) > 4 and [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in whole]


def test_refused_tool_requests_run_no_forward(tiny):
    calls = []
    with served_model(tiny, ServerDefaults()) as (scheduler, url):
        forward = tiny.model.forward
        tiny.model.forward = lambda *a, **k: calls.append(1) or forward(*a, **k)
        try:
            client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
            with pytest.raises(openai.BadRequestError, match="tool_choice"):
                client.chat.completions.create(model="m", messages=ASK, tools=[WEATHER])
            assert calls == []
            client.chat.completions.create(model="m", messages=ASK, tools=[WEATHER], tool_choice="none", max_tokens=4)
            assert calls  # the counter sees a decode's forwards
        finally:
            del tiny.model.forward


def test_tokenize_counts_the_prompt_of_a_chat_with_tools_and_tool_turns(hermes):
    """/tokenize takes the chat's tools (vLLM's field) and a history whose assistant turn only
    called tools (content null): its ids are the prompt the chat request decodes from (it was a
    500 on the null content, and tools an unknown field)."""
    import httpx

    turns = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "sunny"}]}]
    expected = parse(hermes, messages=turns, tools=[WEATHER, FORECAST], tool_choice="required").prompt_ids[0]
    with served_model(hermes, ServerDefaults()) as (_, url):
        got = httpx.post(url + "/tokenize", json={"messages": turns, "tools": [WEATHER, FORECAST]})
        assert got.status_code == 200, got.text
        assert got.json()["tokens"] == expected and got.json()["count"] == len(expected)
        bad = httpx.post(url + "/tokenize", json={"messages": turns, "tools": [{"type": "function"}]})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "tools"
        prompt = httpx.post(url + "/tokenize", json={"prompt": "hi", "tools": [WEATHER]})
        assert prompt.status_code == 400 and "unknown field(s) ['tools']" in prompt.json()["error"]["message"]


def test_a_required_call_too_large_to_build_names_the_tool_fixes(tiny, monkeypatch):
    """A required call's constraint holds every tool's arguments (twice with parallel calls); past
    the table dllm builds (a real vocabulary reaches it with a few tools) the 400, and generate's
    error, say what to change in the tools' terms, not only "simplify the pattern"."""
    from dllm.samplers.constraints import token_dfa

    monkeypatch.setattr(token_dfa, "MAX_TABLE_BYTES", 1 << 10)  # a state or two of the tiny vocabulary
    token_dfa.cached_dfa.cache_clear()
    fixes = 'name one (tool_choice {"type": "function", "function": {"name": ...}})'
    with pytest.raises(RequestError) as err:
        parse(tiny, tools=[WEATHER, FORECAST], tool_choice="required")
    assert err.value.param == "tools" and fixes in str(err.value) and "parallel_tool_calls false" in str(err.value)
    with pytest.raises(RequestError) as err:
        parse(tiny, tools=[WEATHER, FORECAST], tool_choice="required", parallel_tool_calls=False)
    assert fixes in str(err.value) and "parallel_tool_calls" not in str(err.value)
    with pytest.raises(ValueError, match=re.escape(fixes)):
        tiny.generate(ASK, tools=[WEATHER, FORECAST], tool_choice="required", max_tokens=64)
    with pytest.raises(RequestError) as err:  # a named call's schema is the client's own: no tool advice
        parse(tiny, tools=[WEATHER, FORECAST], tool_choice={"type": "function", "function": {"name": "weather"}})
    assert "states" in str(err.value) and fixes not in str(err.value)
    token_dfa.cached_dfa.cache_clear()
