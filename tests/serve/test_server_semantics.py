"""OpenAI semantics (issue 31), through the real openai client: usage counts each prompt once,
a request without a seed gets a fresh one that the response reports (and that replays it), the
``dllm`` stats are there whatever ended the row (and their forwards are in /metrics), and
logprobs / top_logprobs on completions and chat, streamed in position order."""
from __future__ import annotations

import math
import re

import httpx
import openai
import pytest

import dllm
from dllm.serve.app import create_app
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import ServerDefaults
from dllm.serve.scheduler import BatchScheduler
from serve_helpers import running_server

PROMPT = "Alice Smith, Bob Jones, Carol White. Who is second?"
MESSAGES = [{"role": "user", "content": "Reverse the list: Ann Lee, Tom Kay, Sue Ray"}]
DEFAULTS = ServerDefaults(options={"block_length": 8}, max_tokens=32)


@pytest.fixture(scope="module")
def model():
    return dllm.load()


@pytest.fixture(scope="module")
def server(model):
    scheduler = BatchScheduler(model, SchedulerLimits(max_batch=8, max_queue=32))
    try:
        with running_server(create_app(model, scheduler, defaults=DEFAULTS, served_name="m")) as url:
            yield url
    finally:
        scheduler.close()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=60)


def nfe_total(url: str) -> float:
    return float(re.search(r"^dllm_nfe_total (\S+)$", httpx.get(url + "/metrics").text, re.M).group(1))


def test_usage_counts_each_prompt_once(client, model):
    out = client.completions.create(model="m", prompt=[PROMPT, "Bob"], n=3, max_tokens=8, seed=1)
    prompt_tokens = len(model.encode(PROMPT, chat=False)) + len(model.encode("Bob", chat=False))
    assert out.usage.prompt_tokens == prompt_tokens
    assert out.usage.completion_tokens == sum(len(c.dllm["token_ids"]) for c in out.choices)


def test_fresh_seed_per_request_reported_and_replayable(client):
    kwargs = dict(model="m", prompt=PROMPT, max_tokens=16, temperature=1.5)
    first, second = (client.completions.create(**kwargs) for _ in range(2))
    seeds = [first.dllm["seed"], second.dllm["seed"]]
    assert seeds[0] != seeds[1]
    replay = client.completions.create(seed=seeds[0], **kwargs)
    assert replay.dllm["seed"] == seeds[0] and replay.choices[0].text == first.choices[0].text
    chunks = list(client.completions.create(stream=True, seed=seeds[1], **kwargs))
    assert all(c.dllm["seed"] == seeds[1] for c in chunks)
    assert "".join(c.choices[0].text for c in chunks) == second.choices[0].text


@pytest.mark.parametrize("stream", [False, True])
def test_stats_when_max_tokens_or_a_stop_ends_the_row(client, server, stream):
    cases = [dict(max_tokens=5, extra_body={"block_length": 4, "stop_at_eos": False}),
             dict(max_tokens=32, stop=[","], extra_body={"stop_at_eos": False})]
    for kwargs in cases:
        before = nfe_total(server)
        out = client.completions.create(model="m", prompt=PROMPT, seed=0, stream=stream, **kwargs)
        finish = [c for c in out if c.choices and c.choices[0].finish_reason] if stream else [out]
        stats = finish[0].choices[0].dllm["stats"]
        assert stats is not None and stats["nfe"] >= 1, kwargs
        assert stats["tokens"] == len(finish[0].choices[0].dllm["token_ids"])
        assert nfe_total(server) - before == stats["nfe"]  # its forwards are counted in /metrics


def check_completion_logprobs(choice, top: int) -> None:
    lp = choice.logprobs
    ids = choice.dllm["token_ids"]
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.text_offset) == len(ids) > 0
    assert all(v <= 0 for v in lp.token_logprobs)
    assert lp.text_offset == sorted(lp.text_offset)
    for token, value, alternatives in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert len(alternatives) == top
        best = max(alternatives, key=alternatives.get)  # greedy: the committed token is the argmax
        assert math.isclose(alternatives[best], value, abs_tol=1e-5) and best == token


def test_completion_logprobs(client):
    out = client.completions.create(model="m", prompt=PROMPT, max_tokens=16, logprobs=3, seed=0)
    check_completion_logprobs(out.choices[0], 3)
    plain = client.completions.create(model="m", prompt=PROMPT, max_tokens=16, seed=0)
    assert plain.choices[0].text == out.choices[0].text and plain.choices[0].logprobs is None
    chunks = list(client.completions.create(model="m", prompt=PROMPT, max_tokens=16, logprobs=3, seed=0, stream=True))
    streamed = [v for c in chunks if c.choices[0].logprobs for v in c.choices[0].logprobs.token_logprobs]
    offsets = [v for c in chunks if c.choices[0].logprobs for v in c.choices[0].logprobs.text_offset]
    assert streamed == out.choices[0].logprobs.token_logprobs  # in position order
    assert offsets == out.choices[0].logprobs.text_offset


def test_chat_logprobs(client):
    out = client.chat.completions.create(model="m", messages=MESSAGES, logprobs=True, top_logprobs=2, seed=0)
    content = out.choices[0].logprobs.content
    assert len(content) == len(out.choices[0].dllm["token_ids"])
    for item in content:
        assert item.logprob <= 0 and len(item.top_logprobs) == 2
        assert item.top_logprobs[0].token == item.token
        assert math.isclose(item.top_logprobs[0].logprob, item.logprob, abs_tol=1e-5)
    chunks = list(client.chat.completions.create(model="m", messages=MESSAGES, logprobs=True, seed=0, stream=True))
    streamed = [i.logprob for c in chunks if c.choices[0].logprobs for i in c.choices[0].logprobs.content]
    assert streamed == [i.logprob for i in content]
    with pytest.raises(openai.BadRequestError, match="strategy"):
        client.chat.completions.create(model="m", messages=MESSAGES, logprobs=True, extra_body={"stopper": "sched"})


def test_too_long_speaks_of_the_api_fields(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="m", prompt="x " * 500, max_tokens=30)
    message = err.value.message
    assert "max_tokens 30 (rounded up to 32" in message and "gen_length" not in message
