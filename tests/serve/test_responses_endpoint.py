"""POST /v1/responses (OpenAI's Responses API) through the real ``openai`` client: the answer is the
chat endpoint's for the same messages and seed (instructions are its system message, max_output_tokens
its max_completion_tokens, text.format its response_format), whole or streamed; what it does not
serve is a 400 naming the field, before any row reaches the scheduler."""
from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import httpx
import jsonschema
import openai
import pytest

import dllm
from dllm.serve.app import create_app
from dllm.serve.limits import AccessSettings
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import ServerDefaults
from dllm.serve.responses_api import ResponsesCall, chat_body
from serve_helpers import RecordingScheduler, running_server, served_model

DEFAULTS = ServerDefaults(options={"block_length": 8}, max_tokens=16)
QUESTION = "Reverse the list: Ann Lee, Tom Kay, Sue Ray"
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 5}, "ok": {"type": "boolean"}},
          "required": ["name", "ok"], "additionalProperties": False}


@pytest.fixture(scope="module")
def model():
    return dllm.load()


@pytest.fixture(scope="module")
def server(model):
    with served_model(model, DEFAULTS, RecordingScheduler, max_queue=16) as (scheduler, url):
        yield url, scheduler


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server[0] + "/v1", api_key="unused", max_retries=0, timeout=60)


def chat_text(client, messages, **body):
    out = client.chat.completions.create(model="m", messages=messages, seed=5, **body)
    return out.choices[0].message.content, out


def test_a_response_is_the_chat_answer_for_the_same_messages_and_seed(client):
    resp = client.responses.create(model="m", input=QUESTION, extra_body={"seed": 5})
    text, chat = chat_text(client, [{"role": "user", "content": QUESTION}])
    assert resp.output_text == text != "" and resp.status == "completed" and resp.incomplete_details is None
    assert resp.id.startswith("resp_") and resp.object == "response" and resp.model == "m"
    message = resp.output[0]
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert message.content[0].type == "output_text" and message.content[0].annotations == []
    assert (resp.usage.input_tokens, resp.usage.output_tokens) == (chat.usage.prompt_tokens,
                                                                   chat.usage.completion_tokens)
    assert resp.usage.total_tokens == chat.usage.total_tokens and resp.store is False
    assert resp.to_dict()["completed_at"] >= resp.created_at  # set once completed, null before


def test_instructions_are_a_system_message_and_items_are_messages(client):
    system = "Answer in one word."
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Ann Lee"},
                                                            {"type": "input_text", "text": "Tom Kay"}]},
             {"role": "assistant", "content": [{"type": "output_text", "text": "Noted."}]},
             {"role": "user", "content": "Reverse the list: Sue Ray, Tom Kay"}]
    resp = client.responses.create(model="m", instructions=system, input=items, extra_body={"seed": 5})
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Ann Lee\nTom Kay"},
                {"role": "assistant", "content": "Noted."}, items[2]]
    # (this model's answer to these messages changes without the system message, or with the parts joined otherwise)
    assert resp.output_text == chat_text(client, messages)[0] != ""
    assert resp.instructions == system


def test_a_developer_message_is_a_system_message():
    """OpenAI's developer role (its newer name for system instructions) reaches the template as
    system, as instructions do."""
    body = {"input": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"}]}
    assert chat_body(body)["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]


def test_a_json_schema_format_gives_json_of_that_schema(client):
    fmt = {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}
    resp = client.responses.create(model="m", input="Who?", max_output_tokens=32, text={"format": fmt},
                                   extra_body={"seed": 1})
    jsonschema.validate(json.loads(resp.output_text), PERSON)
    assert resp.text.format.type == "json_schema"


def test_max_output_tokens_cuts_the_answer_and_says_so(client):
    resp = client.responses.create(model="m", input=QUESTION, max_output_tokens=3, extra_body={"seed": 5})
    text, chat = chat_text(client, [{"role": "user", "content": QUESTION}], max_completion_tokens=3)
    assert chat.choices[0].finish_reason == "length"  # the chat answer was cut there too
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"
    assert resp.output_text == text and resp.usage.output_tokens == 3 and resp.max_output_tokens == 3
    assert resp.to_dict()["completed_at"] is None  # an incomplete response never completed


def test_the_stream_adds_up_to_the_whole_response(client):
    whole = client.responses.create(model="m", input=QUESTION, extra_body={"seed": 5}).output_text
    with client.responses.stream(model="m", input=QUESTION, extra_body={"seed": 5}) as stream:
        events = list(stream)
        final = stream.get_final_response()
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) >= 1 and "".join(deltas) == whole == final.output_text
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert final.status == "completed" and final.usage.output_tokens > 0


def test_a_cut_stream_completes_as_incomplete(client):
    with client.responses.stream(model="m", input=QUESTION, max_output_tokens=3, extra_body={"seed": 5}) as stream:
        final = stream.get_final_response()
    assert final.status == "incomplete" and final.incomplete_details.reason == "max_output_tokens"
    assert final.usage.output_tokens == 3


REFUSED = [
    ({"previous_response_id": "resp_1"}, "previous_response_id", "input"),
    ({"tools": [{"type": "web_search"}]}, "tools", "'web_search' tool"),
    ({"reasoning": {"effort": "high"}}, "reasoning", "leave reasoning out"),
    ({"include": ["message.output_text.logprobs"]}, "include", "logprobs"),
    ({"top_logprobs": 3}, "top_logprobs", "/v1/chat/completions"),
    ({"background": True}, "background", "drop background"),
    ({"truncation": "auto"}, "truncation", "shorten the input"),
    ({"text": {"verbosity": "high"}}, "text", "max_output_tokens"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]}, "input",
     "input_image"),
    ({"input": [{"type": "reasoning", "id": "rs_1", "summary": []}]}, "input", "'reasoning'"),
    ({"max_output_tokens": 100000}, "max_output_tokens", "lower max_output_tokens"),
    ({"text": {"format": {"type": "json_schema", "schema": PERSON}}}, "text", "text.format"),
    ({"frequency_penalty": 1.0}, "frequency_penalty", "unknown field"),
    ({"moderation": {"model": "omni-moderation-latest"}}, "moderation", "leave moderation out"),
    ({"stream_options": {"include_obfuscation": True}}, "stream_options", "only allowed with stream=true"),
]


@pytest.mark.parametrize("extra, param, fix", REFUSED, ids=[r[1] + "-" + r[2] for r in REFUSED])
def test_what_is_not_served_is_a_400_naming_the_field_before_any_row(server, extra, param, fix):
    url, scheduler = server
    before = len(scheduler.submitted)
    r = httpx.post(url + "/v1/responses", json={"model": "m", "input": "hi", **extra}, timeout=30)
    error = r.json()["error"]
    assert r.status_code == 400 and error["param"] == param and error["type"] == "invalid_request_error"
    assert fix in error["message"] and "max_completion_tokens" not in error["message"]
    assert len(scheduler.submitted) == before  # no row reached the scheduler


def test_fields_that_mean_nothing_for_the_answer_are_accepted(client):
    plain = client.responses.create(model="m", input=QUESTION, extra_body={"seed": 5})
    extra = client.responses.create(model="m", input=QUESTION, store=True, metadata={"team": "a"}, user="u-1",
                                    service_tier="auto", parallel_tool_calls=False, truncation="disabled",
                                    extra_body={"seed": 5})
    assert extra.output_text == plain.output_text and extra.store is False and extra.metadata == {"team": "a"}


def test_requests_are_counted_under_their_endpoint(server, client):
    client.responses.create(model="m", input="hi", max_output_tokens=4, extra_body={"seed": 2})
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="m", input="hi", background=True)
    metrics = httpx.get(server[0] + "/metrics").text
    assert 'dllm_requests_total{endpoint="responses",status="200"}' in metrics
    assert 'dllm_requests_total{endpoint="responses",status="400"}' in metrics


def test_the_guard_protects_the_responses_path(model):
    scheduler = RecordingScheduler(model, SchedulerLimits(max_batch=1, max_queue=2))
    app = create_app(model, scheduler, defaults=DEFAULTS, served_name="m", access=AccessSettings(api_key="k"))
    try:
        with running_server(app) as url:
            r = httpx.post(url + "/v1/responses", json={"model": "m", "input": "hi"}, timeout=30)
            assert r.status_code == 401 and scheduler.submitted == []
            assert 'endpoint="responses",status="401"' in httpx.get(url + "/metrics").text
    finally:
        scheduler.close()


def test_an_error_after_the_headers_ends_the_stream_as_chat_does():
    """A chat stream's error event (a failed decode, shutdown) becomes the stream's last event: an
    ``error`` event that also carries chat's ``error`` object, which the openai client raises."""
    async def chat_stream():
        chunk = {"id": "chatcmpl-1", "model": "m", "choices": [{"delta": {"content": "A"}, "finish_reason": None}]}
        yield f"data: {json.dumps(chunk)}\n\n"
        error = {"message": "decoding failed", "type": "server_error", "param": None, "code": 500}
        yield f"data: {json.dumps({'error': error})}\n\n" + "data: [DONE]\n\n"

    async def events_of(call):
        return [e async for e in call._events(chat_stream())]

    call = ResponsesCall()
    call.body, call.parsed = {}, SimpleNamespace(max_tokens=4, config=SimpleNamespace(temperature=0.0, top_p=None))
    sse = "".join(asyncio.run(events_of(call)))
    bodies = [json.loads(event.split("data: ", 1)[1]) for event in sse.split("\n\n") if event]
    assert [b["type"] for b in bodies][-2:] == ["response.output_text.delta", "error"]
    assert bodies[-1]["error"]["message"] == "decoding failed" and bodies[-1]["sequence_number"] == len(bodies) - 1
