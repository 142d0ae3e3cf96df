"""``stream_options.include_usage``: every chunk but the last carries ``"usage": null`` and the
last (no choices) the request's usage, as OpenAI documents it and vLLM sends it; without it no
chunk has a usage key. vLLM's ``continuous_usage_stats`` puts each choice's usage so far on its
chunks."""
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


def test_continuous_usage_stats_gives_each_chunk_its_choice_usage(url):
    """vLLM's ``continuous_usage_stats``: every chunk carries its own choice's usage so far (its
    prompt's tokens, the answer tokens decided so far) and the last one the request's; it was
    refused with a 400, which broke vLLM clients that ask for it."""
    prompts = ["hello", "a longer prompt of more tokens"]
    sizes = [httpx.post(url + "/tokenize", json={"prompt": p}).json()["count"] for p in prompts]
    assert sizes[0] != sizes[1]
    chunks = events(url, prompt=prompts, stream_options={"include_usage": True, "continuous_usage_stats": True})
    *choices, last = chunks
    seen: dict[int, list[int]] = {0: [], 1: [], 2: [], 3: []}
    for c in choices:
        (choice,), use = c["choices"], c["usage"]
        prompt = sizes[choice["index"] // 2]  # n=2 samples of each prompt
        assert use["prompt_tokens"] == prompt and use["total_tokens"] == prompt + use["completion_tokens"]
        seen[choice["index"]].append(use["completion_tokens"])
        if choice["finish_reason"]:
            assert use["completion_tokens"] == len(choice["dllm"]["token_ids"])
    assert all(counts and counts == sorted(counts) for counts in seen.values())
    answers = sum(counts[-1] for counts in seen.values())
    assert last["usage"] == {"prompt_tokens": sum(sizes), "completion_tokens": answers,
                             "total_tokens": sum(sizes) + answers}


def test_chat_continuous_usage_starts_at_zero(url):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    prompt = httpx.post(url + "/tokenize", json={"messages": body["messages"]}).json()["count"]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[0]["usage"] == {"prompt_tokens": prompt, "completion_tokens": 0, "total_tokens": prompt}
    assert chunks[-1]["usage"]["completion_tokens"] == chunks[-2]["usage"]["completion_tokens"] > 0


@pytest.mark.parametrize("options, refusal", [
    ({"continuous_usage_stats": True}, "needs include_usage: true"),
    ({"include_usage": True, "continuous_usage_stats": "yes"}, "must be true or false"),
])
def test_continuous_usage_stats_refusals(url, options, refusal):
    r = httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2, "stream": True,
                                                   "stream_options": options})
    assert r.status_code == 400 and refusal in r.json()["error"]["message"]
