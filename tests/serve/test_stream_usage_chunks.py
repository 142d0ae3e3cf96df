"""``stream_options.include_usage``: every chunk but the last carries ``"usage": null`` and the
last (no choices) the request's usage, as OpenAI documents it and vLLM sends it; without it no
chunk has a usage key. vLLM's ``continuous_usage_stats`` puts each choice's usage so far on its
chunks. A stream is each choice's role chunk, its deltas, its finish chunk (OpenAI's reading of the
finish reason), the usage chunk, then ``[DONE]``."""
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


@pytest.mark.parametrize("stream", [False, None])
def test_stream_options_without_a_stream_are_refused(url, stream):
    """A usage chunk exists only in a stream: include_usage on a whole response is a 400 naming
    stream_options (as OpenAI answers it), not silently ignored."""
    r = httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2, "stream": stream,
                                                   "stream_options": {"include_usage": True}})
    error = r.json()["error"]
    assert r.status_code == 400 and error["param"] == "stream_options"
    assert "only allowed with stream=true" in error["message"]


OPENAI_REASON = {"eos": "stop", "stop": "stop", "length": "length"}  # dllm's reading -> OpenAI's


def test_a_chat_stream_is_role_deltas_finish_usage_then_done(url):
    """Each choice's first chunk names the role, its last one carries the finish reason (OpenAI's
    reading of dllm's: an answer cut at max_tokens is "length", never "stop"), the usage chunk
    comes after every choice's finish and ``data: [DONE]`` ends the stream; the whole response
    reads the same finish reasons."""
    body = {"model": "m", "messages": [{"role": "user", "content": "count to ten"}], "max_tokens": 3, "n": 3,
            "seed": 4, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]" and lines.count("data: [DONE]") == 1
    *chunks, usage = [json.loads(line[6:]) for line in lines[:-1]]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] > 0
    by_choice: dict[int, list[dict]] = {}
    for c in chunks:
        (choice,) = c["choices"]
        by_choice.setdefault(choice["index"], []).append(choice)
    assert sorted(by_choice) == [0, 1, 2]
    streamed = []
    for own in by_choice.values():
        assert own[0]["delta"].get("role") == "assistant"
        assert [bool(c["finish_reason"]) for c in own] == [False] * (len(own) - 1) + [True]
        streamed.append((own[-1]["dllm"]["finish_reason"], own[-1]["finish_reason"]))
    whole = httpx.post(url + "/v1/chat/completions", json={**body, "stream": False, "stream_options": None},
                       timeout=60).json()
    read = [(c["dllm"]["finish_reason"], c["finish_reason"]) for c in whole["choices"]]
    assert sorted(read) == sorted(streamed)
    assert all(openai == OPENAI_REASON[own] for own, openai in read)
    assert ("length", "length") in read  # an answer max_tokens cut (not vacuous)
