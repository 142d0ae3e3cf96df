"""``stream_options.include_usage``: every chunk but the last carries ``"usage": null`` and the
last (no choices) the request's usage, as OpenAI documents it and vLLM sends it; without it no
chunk has a usage key."""
from __future__ import annotations

import json

import httpx
import pytest

from dllm.serve.app import create_app
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import ServerDefaults
from dllm.serve.scheduler import BatchScheduler
from serve_helpers import running_server


@pytest.fixture(scope="module")
def url(tiny_models):
    model = tiny_models["llada"]
    scheduler = BatchScheduler(model, SchedulerLimits(max_batch=4, max_queue=8))
    app = create_app(model, scheduler, defaults=ServerDefaults(options={"block_length": 8}, max_tokens=8),
                     served_name="m")
    try:
        with running_server(app) as base:
            yield base
    finally:
        scheduler.close()


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
