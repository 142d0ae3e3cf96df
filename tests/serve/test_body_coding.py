"""Request bodies as httpx, requests and curl frame them: gzip and deflate Content-Encoding undone
(the same answer as the plain body), a coding the server cannot undo a 415 naming the ones it can
(it was read as plain JSON when it parsed), the decoded size held to --max-body-mb, and a declared
non-UTF-8 charset read in that encoding (ISO-8859-1's "é" was a 400)."""
from __future__ import annotations

import gzip
import json
import zlib

import httpx
import pytest

from dllm.serve.app import create_app
from dllm.serve.body import CodingError, body_charset, content_codings, decode_body
from dllm.serve.limits import ServerLimits
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import ServerDefaults
from dllm.serve.scheduler import BatchScheduler
from serve_helpers import running_server

LIMIT = 4096
BODY = {"prompt": "Alice, Bob, Carol. Who is second?", "max_tokens": 8, "seed": 3}
TEXT = "Crème brûlée à la française"  # every accented letter is one ISO-8859-1 byte, two UTF-8 bytes


@pytest.fixture(scope="module")
def url(tiny_models):
    model = tiny_models["llada"]
    scheduler = BatchScheduler(model, SchedulerLimits(max_batch=2, max_queue=4))
    app = create_app(model, scheduler, defaults=ServerDefaults(options={"block_length": 8}, max_tokens=8),
                     served_name="m", limits=ServerLimits(max_body_bytes=LIMIT))
    try:
        with running_server(app) as base:
            yield base
    finally:
        scheduler.close()


def post(url: str, path: str, raw: bytes, **headers: str) -> httpx.Response:
    return httpx.post(url + path, content=raw, timeout=60,
                      headers={"Content-Type": "application/json", **{k.replace("_", "-"): v for k, v in headers.items()}})


def test_compressed_bodies_answer_as_the_plain_one(url):
    raw = json.dumps(BODY).encode()
    plain = post(url, "/v1/completions", raw)
    assert plain.status_code == 200
    expected = plain.json()["choices"][0]["text"]
    for coded, coding in ((gzip.compress(raw), "gzip"), (zlib.compress(raw), "deflate"),
                          (gzip.compress(zlib.compress(raw)), "deflate, gzip"), (raw, "identity")):
        r = post(url, "/v1/completions", coded, Content_Encoding=coding)
        assert r.status_code == 200, (coding, r.text)
        assert r.json()["choices"][0]["text"] == expected, coding
    chunked = httpx.post(url + "/v1/completions", content=iter([gzip.compress(raw)[:9], gzip.compress(raw)[9:]]),
                         headers={"Content-Type": "application/json", "Content-Encoding": "gzip"}, timeout=60)
    assert chunked.status_code == 200 and chunked.json()["choices"][0]["text"] == expected


def test_codings_it_cannot_undo_are_refused(url):
    raw = json.dumps(BODY).encode()
    r = post(url, "/v1/completions", raw, Content_Encoding="br")  # valid JSON under a coding it does not read
    assert r.status_code == 415 and r.headers["accept-encoding"] == "gzip, deflate"
    assert "'br'" in r.json()["error"]["message"] and "gzip, deflate" in r.json()["error"]["message"]
    bad = post(url, "/v1/completions", raw, Content_Encoding="gzip")  # plain bytes said to be gzip
    assert bad.status_code == 400 and "not valid gzip data" in bad.json()["error"]["message"]
    cut = post(url, "/v1/completions", gzip.compress(raw)[:-12], Content_Encoding="gzip")
    assert cut.status_code == 400 and "ends early" in cut.json()["error"]["message"]


def test_the_decoded_body_is_held_to_the_size_limit(url):
    big = json.dumps({**BODY, "prompt": "a " * LIMIT}).encode()
    assert len(gzip.compress(big)) < LIMIT < len(big)
    r = post(url, "/v1/completions", gzip.compress(big), Content_Encoding="gzip")
    assert r.status_code == 413 and f"limit of {LIMIT} bytes" in r.json()["error"]["message"]


def test_a_declared_charset_is_read(url):
    utf8 = post(url, "/tokenize", json.dumps({"prompt": TEXT}, ensure_ascii=False).encode())
    assert utf8.status_code == 200
    expected = utf8.json()["tokens"]
    for charset in ("iso-8859-1", "cp1252", '"latin-1"'):
        raw = json.dumps({"prompt": TEXT}, ensure_ascii=False).encode("latin-1")
        r = post(url, "/tokenize", raw, Content_Type=f"application/json; charset={charset}")
        assert r.status_code == 200 and r.json()["tokens"] == expected, charset
    utf16 = json.dumps({"prompt": TEXT}, ensure_ascii=False).encode("utf-16")  # json.loads reads it as it is
    assert post(url, "/tokenize", utf16, Content_Type="application/json; charset=utf-16").json()["tokens"] == expected
    for charset, status in (("klingon", 415), ("base64", 415)):
        r = post(url, "/tokenize", b"{}", Content_Type=f"application/json; charset={charset}")
        assert r.status_code == status and "UTF-8" in r.json()["error"]["message"], charset
    r = post(url, "/tokenize", "{\"prompt\": \"€\"}".encode("utf-8"), Content_Type="application/json; charset=ascii")
    assert r.status_code == 200  # ASCII is UTF-8's subset: the bytes go to the JSON parser as they are


def test_coding_helpers():
    assert content_codings(["gzip, identity", "Deflate"]) == ["gzip", "deflate"]
    assert content_codings([]) == [] and content_codings([""]) == []
    with pytest.raises(CodingError, match="'zstd'"):
        content_codings(["gzip", "zstd"])
    two_members = gzip.compress(b'{"a": ') + gzip.compress(b"1}")
    assert decode_body(two_members, ["gzip"], 100) == b'{"a": 1}'
    with pytest.raises(CodingError, match="after its deflate data"):
        decode_body(zlib.compress(b"{}") + b"x", ["deflate"], 100)
    assert decode_body(b"x" * 100, [], 10) == b"x" * 100  # a plain body's size is the guard's to check
    with pytest.raises(CodingError) as err:
        decode_body(gzip.compress(b"x" * 11), ["gzip"], 10)
    assert err.value.status == 413
    assert decode_body(gzip.compress(b"x" * 10), ["gzip"], 10) == b"x" * 10  # at the limit: taken
    assert body_charset("application/json") is None and body_charset("application/json; charset=UTF-8") is None
    assert body_charset("application/json; charset=utf-16le") is None
    assert body_charset("application/json; charset=Windows-1252") == "cp1252"
