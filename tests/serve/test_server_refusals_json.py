"""Every refusal in OpenAI's JSON error shape (issue 37): what uvicorn refuses before the app
runs (a request that is not valid HTTP, answered in plain text "Invalid HTTP request received.")
and what the CORS layer refuses (starlette's plain-text "Disallowed CORS origin") now carry
{"error": {"message", "type", "param", "code"}} with the fix named. A real server on 127.0.0.1,
raw sockets and httpx."""
from __future__ import annotations

import json

import httpx
import pytest

import dllm
from dllm.bench.raw_http import raw_exchange, status_of
from dllm.serve.app import create_app
from dllm.serve.connections import header_deadline_protocol
from dllm.serve.limits import AccessSettings, default_allowed_hosts
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import ServerDefaults
from dllm.serve.scheduler import BatchScheduler
from serve_helpers import running_server

ORIGIN = "https://app.example.com"
OTHER = "https://evil.example.net"


@pytest.fixture(scope="module")
def server():
    """(url, port) of a server with one CORS origin, the loopback Host check and the server's
    own connection protocol (as ``dllm serve`` runs it)."""
    model = dllm.load()
    scheduler = BatchScheduler(model, SchedulerLimits(max_batch=2, max_queue=4))
    access = AccessSettings(allowed_origins=(ORIGIN,), allowed_hosts=default_allowed_hosts("127.0.0.1"))
    app = create_app(model, scheduler, defaults=ServerDefaults(options={"block_length": 8}, max_tokens=8),
                     served_name="m", access=access)
    try:
        with running_server(app, http=header_deadline_protocol(5.0)) as url:
            yield url, int(url.rsplit(":", 1)[1])
    finally:
        scheduler.close()


def json_error(answer: bytes) -> tuple[int, dict[str, str], dict]:
    """A raw answer's status, headers (lower-case names) and JSON error object."""
    head, _, body = answer.partition(b"\r\n\r\n")
    headers = dict(line.decode().lower().split(": ", 1) for line in head.split(b"\r\n")[1:])
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    return status_of(answer), headers, error


@pytest.mark.parametrize("request_bytes", [
    b"GARBAGE\r\n\r\n",  # no request line
    b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nno colon here\r\n\r\n",  # a malformed header
    b"GET /health HTTP/1.1\r\n\r\n",  # HTTP/1.1 without Host
    b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: ten\r\n\r\n",  # a length that is no number
    b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Transfer-Encoding: chunked\r\n\r\nZZ\r\n{}\r\n0\r\n\r\n",  # a bad chunk size, the app already reading
], ids=["request line", "header", "host", "content length", "chunk"])
def test_invalid_http_is_a_json_400(server, request_bytes):
    url, port = server
    answer = raw_exchange(port, request_bytes, timeout=10)
    status, headers, error = json_error(answer)
    assert status == 400 and headers["content-type"] == "application/json" and headers["connection"] == "close"
    assert error["type"] == "invalid_request_error" and error["code"] == 400
    assert "not valid HTTP/1.1" in error["message"] and "send a well-formed request" in error["message"]
    assert "bytearray" not in error["message"]
    assert httpx.get(url + "/health", timeout=10).status_code == 200  # the server goes on


def preflight(url: str, origin: str, method: str = "POST", headers: str = "Content-Type") -> httpx.Response:
    return httpx.options(url + "/v1/completions", timeout=10, headers={
        "Origin": origin, "Access-Control-Request-Method": method, "Access-Control-Request-Headers": headers})


def test_cors_refusals_are_json_naming_the_fix(server):
    url, _ = server
    r = preflight(url, OTHER)
    assert r.status_code == 400 and r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == 400
    assert OTHER in error["message"] and f"--allowed-origins {ORIGIN},{OTHER}" in error["message"]
    assert "access-control-allow-origin" not in r.headers
    r = preflight(url, ORIGIN, method="DELETE", headers="Content-Type, X-Trace")
    message = r.json()["error"]["message"]
    assert r.status_code == 400 and "'DELETE'" in message and "X-Trace" in message and "origin" not in message
    assert r.headers["access-control-allow-origin"] == ORIGIN  # the browser still learns what is allowed
    assert preflight(url, ORIGIN).status_code == 200  # an allowed preflight is unchanged
    metrics = httpx.get(url + "/metrics", timeout=10).text
    assert 'dllm_requests_total{endpoint="completions",status="400"} 2.0' in metrics
