"""Who may ask (issue 31): the API key (401 without it; /health and /metrics open unless
protected), JSON bodies only (415: a web page's simple cross-site POST), CORS for the origins
given only, the Host check of a loopback server (DNS rebinding); and the routes around the
completions: /v1/models/{id}, /tokenize, /detokenize, /version, list-form chat content, process
metrics, JSON errors for unknown paths."""
from __future__ import annotations

import time

import httpx
import openai
import pytest

import dllm
from dllm.serve.app import create_app
from dllm.serve.limits import AccessSettings, default_allowed_hosts
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import ServerDefaults
from dllm.serve.scheduler import BatchScheduler
from serve_helpers import running_server

KEY = "s3cret-key"
ORIGIN = "https://app.example.com"
DEFAULTS = ServerDefaults(options={"block_length": 8}, max_tokens=16)


@pytest.fixture(scope="module")
def model():
    return dllm.load()


def serve(model, access: AccessSettings):
    scheduler = BatchScheduler(model, SchedulerLimits(max_batch=4, max_queue=8))
    app = create_app(model, scheduler, defaults=DEFAULTS, served_name="m", access=access)
    return scheduler, running_server(app)


@pytest.fixture(scope="module")
def keyed(model):
    """A server with an API key, one CORS origin and the loopback Host check."""
    access = AccessSettings(api_key=KEY, allowed_origins=(ORIGIN,), allowed_hosts=default_allowed_hosts("127.0.0.1"))
    scheduler, server = serve(model, access)
    try:
        with server as url:
            yield url
    finally:
        scheduler.close()


def client(url: str, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=60)


def test_api_key_is_required(keyed):
    with pytest.raises(openai.AuthenticationError, match="--api-key"):
        client(keyed, "wrong").completions.create(model="m", prompt="hi", max_tokens=4)
    r = httpx.post(keyed + "/v1/completions", json={"prompt": "hi"})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert "(--api-key, $DLLM_API_KEY or $VLLM_API_KEY)" in r.json()["error"]["message"]  # every way to set it
    for scheme in ("Token", "Basic"):  # the key as a Bearer token only
        r = httpx.post(keyed + "/v1/completions", json={"prompt": "hi"}, headers={"Authorization": f"{scheme} {KEY}"})
        assert r.status_code == 401, scheme
    assert client(keyed).completions.create(model="m", prompt="hi", max_tokens=4).choices[0].finish_reason
    assert httpx.get(keyed + "/health").status_code == 200  # open by default
    assert httpx.get(keyed + "/metrics").status_code == 200
    assert 'dllm_requests_total{endpoint="completions",status="401"}' in httpx.get(keyed + "/metrics").text


def test_health_and_metrics_can_need_the_key(model):
    scheduler, server = serve(model, AccessSettings(api_key=KEY, protect_health_metrics=True))
    try:
        with server as url:
            assert httpx.get(url + "/metrics").status_code == 401
            assert httpx.get(url + "/health", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    finally:
        scheduler.close()


def test_only_json_bodies(keyed):
    auth = {"Authorization": f"Bearer {KEY}"}
    for ctype in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {**auth, **({"Content-Type": ctype} if ctype else {})}
        r = httpx.post(keyed + "/v1/completions", content=b'{"prompt": "hi"}', headers=headers)
        assert r.status_code == 415 and "application/json" in r.json()["error"]["message"]
    r = httpx.post(keyed + "/v1/completions", json={"prompt": "hi", "max_tokens": 4},
                   headers={**auth, "Content-Type": "application/json; charset=utf-8"})
    assert r.status_code == 200


def test_cors_for_the_allowed_origin_only(keyed, model):
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}
    ok = httpx.options(keyed + "/v1/completions", headers={"Origin": ORIGIN, **preflight})
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == ORIGIN
    evil = httpx.options(keyed + "/v1/completions", headers={"Origin": "https://evil.example", **preflight})
    assert "access-control-allow-origin" not in evil.headers
    scheduler, server = serve(model, AccessSettings())  # no --allowed-origins: no CORS headers at all
    try:
        with server as url:
            r = httpx.get(url + "/health", headers={"Origin": ORIGIN})
            assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    finally:
        scheduler.close()


def test_loopback_server_refuses_foreign_hosts(keyed):
    """DNS rebinding: a page on evil.example whose name now points at 127.0.0.1 sends its own Host."""
    port = keyed.rsplit(":", 1)[1]
    r = httpx.get(keyed + "/health", headers={"Host": f"evil.example:{port}"})
    assert r.status_code == 400 and "--allowed-hosts" in r.json()["error"]["message"]
    assert httpx.get(keyed + "/health", headers={"Host": f"localhost:{port}"}).status_code == 200
    assert httpx.get(keyed + "/health", headers={"Host": f"[::1]:{port}"}).status_code == 200  # IPv6 loopback, bracketed
    assert httpx.get(keyed + "/health", headers={"Host": f"[::2]:{port}"}).status_code == 400


def test_models_retrieve_version_and_unknown_paths(keyed):
    c = client(keyed)
    card = c.models.retrieve("m")
    assert card.id == "m"
    # created: when the server started serving it (it was 0, 1970, which clients sort and show as such)
    assert time.time() - 600 < card.created <= time.time() and c.models.list().data[0].created == card.created
    with pytest.raises(openai.NotFoundError, match="serves 'm'"):
        c.models.retrieve("other")
    assert httpx.get(keyed + "/version").json()["version"]
    r = httpx.get(keyed + "/v1/nothing", headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 404 and r.json()["error"]["message"]


def test_get_routes_answer_head(keyed):
    """HEAD (curl -I, load balancers' and uptime monitors' probes) gets the GET's status and
    headers without a body; it was 405 Method Not Allowed. The key is still asked where GET asks."""
    auth = {"Authorization": f"Bearer {KEY}"}
    for path in ("/health", "/metrics", "/version", "/v1/models", "/v1/models/m"):
        got, head = httpx.get(keyed + path, headers=auth), httpx.head(keyed + path, headers=auth)
        assert (head.status_code, head.content) == (200, b""), path
        assert head.headers["content-type"] == got.headers["content-type"], path
    assert httpx.head(keyed + "/v1/models/other", headers=auth).status_code == 404
    listed = httpx.get(keyed + "/v1/models/", headers=auth)  # was 404 "the model '' does not exist"
    assert listed.status_code == 200 and listed.json() == httpx.get(keyed + "/v1/models", headers=auth).json()
    assert httpx.head(keyed + "/v1/models").status_code == 401
    assert httpx.head(keyed + "/v1/chat/completions", headers=auth).status_code == 405  # POST only


def test_tokenize_and_detokenize(keyed, model):
    auth = {"Authorization": f"Bearer {KEY}"}
    r = httpx.post(keyed + "/tokenize", json={"prompt": "Alice Smith"}, headers=auth).json()
    assert r["tokens"] == model.encode("Alice Smith", chat=False) and r["count"] == len(r["tokens"])
    messages = [{"role": "user", "content": "hi"}]
    chat = httpx.post(keyed + "/tokenize", json={"messages": messages}, headers=auth).json()
    assert chat["tokens"] == model.encode(messages, chat=True)
    back = httpx.post(keyed + "/detokenize", json={"tokens": r["tokens"]}, headers=auth).json()
    assert back["prompt"] == "Alice Smith"
    # vLLM's fields: they were 400 "nothing else"; token_strs are the tokenizer's pieces of the ids
    extras = httpx.post(keyed + "/tokenize", json={"prompt": "Alice Smith", "add_special_tokens": False,
                                                   "return_token_strs": True}, headers=auth).json()
    assert extras["tokens"] == r["tokens"] and extras["token_strs"] == model.tokenizer.convert_ids_to_tokens(r["tokens"])
    assert "".join(extras["token_strs"]).replace("\u0120", " ") == "Alice Smith" and r["token_strs"] is None
    opened = httpx.post(keyed + "/tokenize", json={"messages": messages, "add_generation_prompt": True},
                        headers=auth).json()
    assert opened["tokens"] == chat["tokens"]
    for field, body in (("add_special_tokens", {"prompt": "x", "add_special_tokens": True}),
                        ("add_generation_prompt", {"messages": messages, "add_generation_prompt": False}),
                        ("return_token_strs", {"prompt": "x", "return_token_strs": "yes"})):
        refused = httpx.post(keyed + "/tokenize", json=body, headers=auth)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == field
    bad = httpx.post(keyed + "/detokenize", json={"tokens": [10**9]}, headers=auth)
    assert bad.status_code == 400 and "vocabulary" in bad.json()["error"]["message"]


def test_list_form_chat_content_equals_string_content(keyed):
    c = client(keyed)
    text = "Reverse the list: Ann Lee, Tom Kay"
    plain = c.chat.completions.create(model="m", messages=[{"role": "user", "content": text}], seed=1)
    parts = c.chat.completions.create(model="m", seed=1,
                                      messages=[{"role": "user", "content": [{"type": "text", "text": text}]}])
    assert parts.choices[0].message.content == plain.choices[0].message.content
    with pytest.raises(openai.BadRequestError, match="text parts only"):
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://x"}}]}])


def test_process_metrics(keyed):
    text = httpx.get(keyed + "/metrics").text
    assert "process_resident_memory_bytes" in text and "process_cpu_seconds_total" in text
