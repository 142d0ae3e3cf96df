"""``stream_options.include_usage``: every chunk but the last carries ``"usage": null`` and the
last (no choices) the request's usage, as OpenAI documents it and vLLM sends it; without it no
chunk has a usage key."""
from __future__ import annotations

import json

import httpx
import pytest

from dllm.serve.requests import ServerDefaults
from serve_helpers import served_model


@pytest.fixture(scope="module")
def url(tiny_models):
    with served_model(tiny_models["llada"], ServerDefaults(options={"block_length": 8}, max_tokens=8)) as (_, base):
        yield base


def events(url: str, **body) -> list[dict]:
    body = {"model": "m", "prompt": "hello", "max_tokens": 4, "n": 2, "seed": 1, "stream": True, **body}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]


def test_include_usage_nulls_every_chunk_but_the_last(url):
    chunks = events(url, stream_options={"include_usage": True})
    *choices, last = chunks
    assert choices and all("usage" in c and c["usage"] is None and c["choices"] for c in choices)
    tokens = sum(len(c["choices"][0]["dllm"]["token_ids"]) for c in choices if c["choices"][0]["finish_reason"])
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == tokens
    assert all("usage" not in c for c in events(url))
