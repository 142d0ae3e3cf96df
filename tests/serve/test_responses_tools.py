"""Function tools on POST /v1/responses, through the real ``openai`` client: the Responses API's
flat tools and tool_choice are chat's, a call comes back as a ``function_call`` item equal to chat's
tool call for the same seed (after the message of any text), the stream's events add up to the
whole response's items, a function_call / function_call_output history reaches the chat template
as chat's tool turns, and what is not served is a 400 naming the field before any row."""
from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import httpx
import jsonschema
import openai
import pytest
from fastapi.responses import JSONResponse

import dllm
from dllm.api.tools import parse_tool_choice
from dllm.serve.requests import ServerDefaults, parse_request
from dllm.serve.responses import ResponseWriter, sse
from dllm.serve.responses_api import ResponsesCall
from dllm.serve.tool_stream import ToolStream, finish_reason
from serve_helpers import RecordingScheduler, served_model
from test_tool_calls import HERMES_TEMPLATE

CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 6}}, "required": ["city"],
        "additionalProperties": False}
DAYS = {"type": "object", "properties": {"days": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["days"], "additionalProperties": False}
# the Responses API's flat function tools, and the same tools in chat's form
TOOLS = [{"type": "function", "name": "weather", "description": "today's weather", "parameters": CITY, "strict": True},
         {"type": "function", "name": "forecast", "parameters": DAYS}]
CHAT_TOOLS = [{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in TOOLS]
SCHEMAS = {"weather": CITY, "forecast": DAYS}
ASK = "Weather in Paris?"
DEFAULTS = ServerDefaults(max_tokens=64)


@pytest.fixture(scope="module")
def tiny(tiny_dirs):
    return dllm.load(tiny_dirs["llada"], dtype="float32")


@pytest.fixture(scope="module")
def server(tiny):
    """(base URL, the scheduler, an openai client of the server)."""
    with served_model(tiny, DEFAULTS, RecordingScheduler, max_batch=2) as (scheduler, url):
        yield url, scheduler, openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=60)


def calls_of(resp):
    return [(item.name, item.arguments) for item in resp.output if item.type == "function_call"]


def items_one_after_another(events, count):
    """Each output item is added, then done, before the next one is added, at indexes 0, 1, ..."""
    lifecycle = [(e.type.rsplit(".", 1)[1], e.output_index) for e in events
                 if e.type.startswith("response.output_item.")]
    return lifecycle == [(kind, i) for i in range(count) for kind in ("added", "done")]


# (Responses tool_choice, chat tool_choice, parallel_tool_calls, seed)
FORCED = [({"type": "function", "name": "forecast"}, {"type": "function", "function": {"name": "forecast"}}, None, 3),
          ("required", "required", False, 5),
          ("required", "required", None, 2)]


@pytest.mark.parametrize("choice, chat_choice, parallel, seed", FORCED, ids=["named", "required-one", "required"])
def test_forced_calls_are_chats_tool_calls_for_the_same_seed(server, choice, chat_choice, parallel, seed):
    client = server[2]
    extra = {} if parallel is None else {"parallel_tool_calls": parallel}
    resp = client.responses.create(model="m", input=ASK, tools=TOOLS, tool_choice=choice, extra_body={"seed": seed},
                                   **extra)
    chat = client.chat.completions.create(model="m", messages=[{"role": "user", "content": ASK}], tools=CHAT_TOOLS,
                                          tool_choice=chat_choice, seed=seed, **extra).choices[0].message
    assert chat.content is None and chat.tool_calls  # chat answered with calls only
    assert calls_of(resp) == [(c.function.name, c.function.arguments) for c in chat.tool_calls]
    assert [item.type for item in resp.output] == ["function_call"] * len(chat.tool_calls)  # no message item
    for item in resp.output:
        jsonschema.validate(json.loads(item.arguments), SCHEMAS[item.name])
        assert item.call_id.startswith("call_") and item.id == "fc_" + item.call_id[len("call_"):]
        assert item.status == "completed"
    assert resp.status == "completed" and resp.output_text == ""
    assert resp.tool_choice.type == "function" if isinstance(choice, dict) else resp.tool_choice == choice
    assert [t.name for t in resp.tools] == ["weather", "forecast"] and resp.parallel_tool_calls is (parallel is None)


@pytest.mark.parametrize("choice, seed", [({"type": "function", "name": "weather"}, 3), ("required", 5)],
                         ids=["named", "required"])
def test_streamed_calls_add_up_to_the_whole_response(server, choice, seed):
    client = server[2]
    body = dict(model="m", input=ASK, tools=TOOLS, tool_choice=choice, extra_body={"seed": seed})
    whole = client.responses.create(**body)
    with client.responses.stream(**body) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert calls_of(final) == calls_of(whole) != []
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added = [e for e in events if e.type == "response.output_item.added"]
    done = [e for e in events if e.type == "response.output_item.done"]
    assert items_one_after_another(events, len(whole.output))
    for index, item in enumerate(final.output):
        deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"
                  and e.output_index == index]
        (args_done,) = [e for e in events if e.type == "response.function_call_arguments.done"
                        and e.output_index == index]
        assert "".join(deltas) == args_done.arguments == item.arguments
        assert added[index].item.call_id == done[index].item.call_id == item.call_id
        assert args_done.item_id == item.id and added[index].item.status == "in_progress"
        assert done[index].item.model_dump() == item.model_dump(exclude={"parsed_arguments"})
        if item.name == "weather":  # a strict tool: the SDK reads its arguments
            assert item.parsed_arguments == json.loads(item.arguments)
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-3:] == ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]


# ---- the stream's items from chat's tool deltas, without a model ----

AUTO = parse_tool_choice(CHAT_TOOLS, "auto")
HERMES_ANSWER = ('Let me look.\n<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
                 '<tool_call>{"name": "forecast", "arguments": {"days": 2}}</tool_call>')


def mock_client(respond):
    """An openai client whose every request is answered by ``respond(request)`` (an httpx.Response)."""
    return openai.OpenAI(base_url="http://test/v1", api_key="x", max_retries=0,
                         http_client=httpx.Client(transport=httpx.MockTransport(respond)))


def translated(choice, text, finish, stream):
    """The /v1/responses answer for a chat answer of ``text``: whole (the chat message the
    writer gives) or streamed (the chat chunks of the tool stream's deltas, in three pieces)."""
    call = ResponsesCall()
    call.parsed = SimpleNamespace(max_tokens=64, config=SimpleNamespace(temperature=0.0, top_p=None))
    writer = ResponseWriter(True, "m", "r1", 0, tools=choice)
    chunk = {"id": writer.id, "model": "m", "dllm": {"seed": 0}}
    usage = {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}
    if not stream:
        slot = {"finish_reason": finish}
        message = writer._message(text, slot)
        chat = dict(chunk, usage=usage, choices=[dict(slot, index=0, message=message, dllm={})])
        return call.respond(JSONResponse(chat)).body

    async def chunks():
        tools = ToolStream(choice)
        third = len(text) // 3
        deltas = [d for piece in (text[:third], text[third:2 * third], text[2 * third:]) for d in tools.feed(piece)]
        for delta in [{"role": "assistant"}] + deltas + tools.finish():
            yield sse(dict(chunk, choices=[{"index": 0, "delta": delta, "finish_reason": None}]))
        last = {"index": 0, "delta": {}, "finish_reason": finish_reason(choice, tools.calls, finish), "dllm": {}}
        yield sse(dict(chunk, choices=[last])) + sse(dict(chunk, choices=[], usage=usage))

    async def collect():
        return "".join([event async for event in call._events(chunks())]).encode()

    return asyncio.run(collect())


def shape(item):
    """An output item without its ids (each request draws its own call ids)."""
    if item.type == "message":
        return item.type, item.status, [part.text for part in item.content]
    return item.type, item.status, item.name, item.arguments


@pytest.mark.parametrize("choice, text, finish, kinds, content", [
    (AUTO, HERMES_ANSWER, "stop", ["message", "function_call", "function_call"], "Let me look.\n"),
    (AUTO, "It is sunny.", "stop", ["message"], "It is sunny."),
    (AUTO, "", "stop", ["message"], ""),
    (parse_tool_choice(CHAT_TOOLS, "required"), '[{"name": "forecast", "arguments": {"days": 3}}]', "stop",
     ["function_call"], ""),
    (parse_tool_choice(CHAT_TOOLS, {"type": "function", "function": {"name": "weather"}}), '{"city": "Pa', "length",
     ["function_call"], ""),
], ids=["auto-text-and-calls", "auto-text", "auto-empty", "required", "named-cut"])
def test_streamed_items_equal_the_whole_ones(choice, text, finish, kinds, content):
    whole = mock_client(lambda request: httpx.Response(200, content=translated(choice, text, finish, False),
                                                       headers={"content-type": "application/json"}))
    streamed = mock_client(lambda request: httpx.Response(200, content=translated(choice, text, finish, True),
                                                          headers={"content-type": "text/event-stream"}))
    resp = whole.responses.create(model="m", input=ASK)
    with streamed.responses.stream(model="m", input=ASK) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [item.type for item in resp.output] == kinds and resp.output_text == final.output_text == content
    assert [shape(item) for item in final.output] == [shape(item) for item in resp.output]
    assert [shape(e.item) for e in events if e.type == "response.output_item.done"] == list(map(shape, resp.output))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert items_one_after_another(events, len(kinds))
    cut = finish == "length"
    assert resp.status == final.status == ("incomplete" if cut else "completed")
    assert [item.status for item in resp.output][:-1] == ["completed"] * (len(kinds) - 1)
    assert resp.output[-1].status == resp.status


# ---- the history of calls and their outputs ----

@pytest.fixture(scope="module")
def hermes(tiny_dirs):
    """The tiny model with a chat template that shows tools (and tool turns) in Hermes' form."""
    return dllm.load(tiny_dirs["llada"], dtype="float32", chat_template=HERMES_TEMPLATE)


def test_a_call_history_reaches_the_template_as_chats_tool_turns(hermes):
    items = [{"role": "user", "content": ASK},
             {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
              "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
             {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "weather",
              "arguments": '{"city": "Paris"}', "status": "completed"},
             {"type": "function_call", "call_id": "call_2", "name": "forecast", "arguments": '{"days": 2}'},
             {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
             {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "rain"}]},
             {"role": "user", "content": "And tomorrow?"}]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": ASK},
                {"role": "assistant", "content": "Let me look.", "tool_calls": [
                    {"id": item["call_id"], "type": "function",
                     "function": {"name": item["name"], "arguments": item["arguments"]}} for item in items[2:4]]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {"role": "tool", "tool_call_id": "call_2", "content": "rain"},
                {"role": "user", "content": "And tomorrow?"}]

    def parse(body):
        return parse_request(body, hermes, DEFAULTS, chat=True, served_name="m")

    got = ResponsesCall().parse({"input": items, "instructions": "Be brief.", "tools": TOOLS}, parse)
    assert got.prompt_ids == parse({"messages": messages, "tools": CHAT_TOOLS}).prompt_ids
    prompt = hermes.tokenizer.decode(got.prompt_ids[0])
    assert '<|assistant|>Let me look.<tool_call>{"name": "weather", "arguments": {"city": "Paris"}}</tool_call>' \
           '<tool_call>{"name": "forecast"' in prompt and "<|tool|>sunny<|tool|>rain" in prompt


def test_auto_on_a_template_that_shows_tools_is_chats_answer(hermes):
    with served_model(hermes, DEFAULTS) as (_, url):
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=60)
        resp = client.responses.create(model="m", input=ASK, tools=TOOLS, max_output_tokens=8, extra_body={"seed": 4})
        chat = client.chat.completions.create(model="m", messages=[{"role": "user", "content": ASK}], seed=4,
                                              tools=CHAT_TOOLS, max_completion_tokens=8).choices[0].message
    assert resp.output_text == (chat.content or "") and calls_of(resp) == [
        (c.function.name, c.function.arguments) for c in chat.tool_calls or []]
    assert resp.tool_choice == "auto"


# ---- refusals, before any row ----

NAMED_FORM = '{"type": "function", "name": ...}'
REFUSED = [
    ({"tools": [{"type": "web_search"}]}, "tools", "'web_search' tool"),
    ({"tools": [{"type": "mcp", "server_label": "x"}], "tool_choice": "required"}, "tools", "'mcp' tool"),
    ({"tools": [dict(TOOLS[0], defer_loading=True)], "tool_choice": "required"}, "tools", "['defer_loading']"),
    ({"tools": [dict(TOOLS[0], name="bad name")], "tool_choice": "required"}, "tools", "tools[0].name must be"),
    ({"tools": TOOLS}, "tool_choice", NAMED_FORM),  # auto, the default, on a template that ignores tools
    ({"tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice", "'nope'"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "weather"}}}, "tool_choice",
     NAMED_FORM),
    ({"tools": TOOLS, "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}}, "tool_choice",
     NAMED_FORM),
    ({"tool_choice": "required"}, "tool_choice", "needs tools"),
    ({"tool_choice": {"type": "function", "name": "weather"}}, "tool_choice", "needs tools"),
    ({"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": "no"}, "parallel_tool_calls", "true or false"),
    ({"max_tool_calls": 2}, "max_tool_calls", "parallel_tool_calls"),
    ({"input": [{"type": "function_call_output", "call_id": "call_9", "output": "1"}]}, "input", "'call_9'"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "weather", "arguments": "{oops"}]}, "input",
     "JSON object"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "weather", "arguments": "{}", "x": 1}]}, "input",
     "['x']"),
]


@pytest.mark.parametrize("extra, param, fix", REFUSED, ids=[r[1] + "-" + r[2] for r in REFUSED])
def test_what_is_not_served_is_a_400_naming_the_field_before_any_row(server, extra, param, fix):
    url, scheduler, _ = server
    before = len(scheduler.submitted)
    r = httpx.post(url + "/v1/responses", json={"model": "m", "input": ASK, **extra}, timeout=30)
    error = r.json()["error"]
    assert r.status_code == 400 and error["param"] == param, error
    assert fix in error["message"] and ".function." not in error["message"]
    told = error["message"].replace(repr(extra.get("tool_choice")), "")  # what the request sent is quoted as sent
    assert not any(chats in told for chats in ('"function": {', "'function': {"))  # chat's form
    assert len(scheduler.submitted) == before

