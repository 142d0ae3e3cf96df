"""Deeply nested JSON (issue 37): a body nested beyond ``MAX_JSON_DEPTH`` is a 400 in OpenAI's
error shape on every route that reads a body, found before the parser runs, where it used to be
a 503 (which the openai client retries) or a 500 with a traceback."""
from __future__ import annotations

import json

import httpx
import openai
import pytest

import dllm
from dllm.serve import body as body_module
from dllm.serve.app import create_app
from dllm.serve.body import MAX_JSON_DEPTH, json_depth, parse_json
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import RequestError, ServerDefaults
from dllm.serve.scheduler import BatchScheduler
from serve_helpers import running_server

ROUTES = ("/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize")


def nested(depth: int) -> list:
    """A list nested ``depth`` deep (depth 1: [])."""
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize("raw, depth", [
    (b"1", 0), (b'"x"', 0), (b"{}", 1), (b"[[1], [2, [3]]]", 3),
    (b'{"a": "[[[{{{", "b": [{"c": 1}]}', 3),  # brackets inside strings do not count
    (b'{"a": "\\"[[[\\"", "b": []}', 2),  # nor after an escaped quote
    (b'{"a": "\\\\", "b": [[]]}', 3),  # an escaped backslash ends no string
    (b"[" * 1000, 1000),  # invalid JSON still has a depth
])
def test_json_depth(raw, depth):
    assert json_depth(raw) == depth


def test_depth_of_generated_values():
    for depth in (1, 2, 17, MAX_JSON_DEPTH + 1):
        raw = json.dumps({"k": "]]}{[", "v": nested(depth)}).encode()  # the object adds one level
        assert json_depth(raw) == depth + 1


def test_parse_json_refuses_before_the_parser_runs(monkeypatch):
    ok = json.dumps(nested(MAX_JSON_DEPTH)).encode()
    assert parse_json(ok) == nested(MAX_JSON_DEPTH)
    loads = []
    monkeypatch.setattr(body_module.json, "loads", lambda raw: loads.append(raw))
    with pytest.raises(RequestError, match=f"{MAX_JSON_DEPTH + 1} deep.*at most {MAX_JSON_DEPTH}"):
        parse_json(json.dumps(nested(MAX_JSON_DEPTH + 1)).encode())
    assert not loads


@pytest.fixture(scope="module")
def server():
    model = dllm.load()
    scheduler = BatchScheduler(model, SchedulerLimits(max_batch=2, max_queue=4))
    app = create_app(model, scheduler, defaults=ServerDefaults(options={"block_length": 8}, max_tokens=8),
                     served_name="m")
    try:
        with running_server(app) as url:
            yield url
    finally:
        scheduler.close()


@pytest.mark.parametrize("route", ROUTES)
def test_deep_bodies_are_400_on_every_route(server, route):
    raw = b'{"model": "m", "prompt": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    r = httpx.post(server + route, content=raw, headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["code"] == 400
    assert "1001 deep" in error["message"] and "flatter" in error["message"]
    shallow = json.dumps({"model": "m", "tokens": nested(MAX_JSON_DEPTH - 1)})  # within the depth: another 400
    r = httpx.post(server + route, content=shallow, headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 400 and "deep" not in r.json()["error"]["message"]


def test_openai_client_gets_a_bad_request_not_a_retry(server):
    client = openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=30)
    with pytest.raises(openai.BadRequestError, match="at most"):
        client.completions.create(model="m", prompt="hi", max_tokens=4, extra_body={"policy_args": nested(200)})
    assert client.completions.create(model="m", prompt="hi", max_tokens=4).choices[0].finish_reason
