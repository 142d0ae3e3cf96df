"""The server through the real ``openai`` client on 127.0.0.1: every answer equals what
``generate`` gives for the same prompt, config and seed, cut at its stops and max_tokens."""
from __future__ import annotations

import concurrent.futures
import json
from typing import NamedTuple

import httpx
import openai
import pytest

import dllm
from dllm.engine.config import sample_seeds
from dllm.serve.app import create_app
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import ServerDefaults
from serve_helpers import RecordingScheduler, running_server, wait_until

PROMPT = "Alice Smith, Bob Jones, Carol White. Who is second?"
MESSAGES = [{"role": "user", "content": "Reverse the list: Ann Lee, Tom Kay, Sue Ray"}]
DEFAULTS = ServerDefaults(options={"block_length": 8}, max_tokens=32)
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def model():
    return dllm.load()


@pytest.fixture(scope="module")
def server(model):
    """(base url, scheduler) of one server for the module's tests."""
    scheduler = RecordingScheduler(model, SchedulerLimits(max_batch=8, max_queue=64))
    try:
        with running_server(create_app(model, scheduler, defaults=DEFAULTS, served_name="dllm-test")) as url:
            yield url, scheduler
    finally:
        scheduler.close()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server[0] + "/v1", api_key="unused", max_retries=0, timeout=60)


class Expected(NamedTuple):
    text: str
    ids: list[int]
    finish_reason: str


def expected(model, prompt_ids, *, max_tokens=32, seed=0, stop=None, **options):
    """What one single ``generate`` call answers, cut as the server cuts (max_tokens, stops)."""
    options = {"block_length": 8, **options}
    out = model.generate_ids([prompt_ids], seeds=[seed], stop=stop, max_tokens=max_tokens, **options)
    return Expected(text=out.texts[0], ids=out.token_ids[0], finish_reason=out.finish_reasons[0])


def raw_ids(model, text):
    return model.encode(text, chat=False)


def test_completion_equals_generate(model, client):
    out = client.completions.create(model="dllm-test", prompt=PROMPT, max_tokens=24)
    want = expected(model, raw_ids(model, PROMPT), max_tokens=24)
    choice = out.choices[0]
    assert choice.text == want.text
    assert choice.finish_reason == ("length" if want.finish_reason == "length" else "stop")
    assert choice.dllm["finish_reason"] == want.finish_reason and choice.dllm["token_ids"] == want.ids
    assert out.usage.prompt_tokens == len(raw_ids(model, PROMPT))
    assert out.usage.completion_tokens == len(want.ids)


def test_chat_equals_generate(model, client):
    out = client.chat.completions.create(model="dllm-test", messages=MESSAGES)
    want = expected(model, model.encode(MESSAGES, chat=True))
    assert out.choices[0].message.content == want.text
    assert out.choices[0].message.role == "assistant"


@pytest.mark.parametrize("chat", [False, True])
def test_stream_concatenates_to_whole_text(model, client, chat):
    kwargs = dict(model="dllm-test", max_tokens=32, extra_body={"policy": "low_confidence"})
    if chat:
        whole = client.chat.completions.create(messages=MESSAGES, **kwargs).choices[0].message.content
        chunks = list(client.chat.completions.create(messages=MESSAGES, stream=True, **kwargs))
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    else:
        whole = client.completions.create(prompt=PROMPT, **kwargs).choices[0].text
        chunks = list(client.completions.create(prompt=PROMPT, stream=True, **kwargs))
        streamed = "".join(c.choices[0].text for c in chunks)
    assert streamed == whole
    assert sum(1 for c in chunks if c.choices[0].finish_reason is not None) == 1
    assert len([c for c in chunks if (c.choices[0].text if not chat else c.choices[0].delta.content)]) > 1


def test_stop_string_cuts_and_frees_the_row(model, client, server):
    full = expected(model, raw_ids(model, PROMPT))
    stop = full.text[len(full.text) // 2 : len(full.text) // 2 + 2]
    want = expected(model, raw_ids(model, PROMPT), stop=stop)
    assert want.finish_reason == "stop" and len(want.text) < len(full.text)
    out = client.completions.create(model="dllm-test", prompt=PROMPT, stop=[stop])
    assert out.choices[0].text == want.text and out.choices[0].finish_reason == "stop"
    assert out.choices[0].dllm["finish_reason"] == "stop"
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="dllm-test", prompt=PROMPT, stop=stop, stream=True))
    assert streamed == want.text
    scheduler = server[1]
    assert wait_until(lambda: scheduler.running_rows == 0)


def test_max_tokens_cuts_inside_a_block(model, client):
    out = client.completions.create(model="dllm-test", prompt=PROMPT, max_tokens=5,
                                    extra_body={"block_length": 4, "stop_at_eos": False})
    want = expected(model, raw_ids(model, PROMPT), max_tokens=5, block_length=4, stop_at_eos=False)
    assert out.choices[0].text == want.text and len(out.choices[0].dllm["token_ids"]) <= 5


def test_n_samples_use_distinct_seeds(model, client):
    out = client.completions.create(model="dllm-test", prompt=PROMPT, n=3, seed=7, temperature=1.0, max_tokens=16)
    assert [c.index for c in out.choices] == [0, 1, 2]
    for choice, seed in zip(out.choices, sample_seeds(7, 3)):
        assert choice.text == expected(model, raw_ids(model, PROMPT), max_tokens=16, seed=seed, temperature=1.0).text
    assert len({c.text for c in out.choices}) > 1


def test_echo_and_prompt_lists(model, client):
    """Prompt p's sample j is choice p * n + j, and echoes prompt p."""
    out = client.completions.create(model="dllm-test", prompt=[PROMPT, raw_ids(model, "Bob")], echo=True, max_tokens=8,
                                    n=2)
    assert [c.index for c in out.choices] == [0, 1, 2, 3]
    answer = expected(model, raw_ids(model, PROMPT), max_tokens=8).text  # greedy: both samples alike
    assert out.choices[0].text == out.choices[1].text == PROMPT + answer
    assert out.choices[2].text.startswith("Bob") and out.choices[3].text.startswith("Bob")


BAD_REQUESTS = {
    "unknown policy": {"prompt": "x", "policy": "no_such_rule"},
    "policy option type": {"prompt": "x", "policy": "threshold", "policy_args": {"tau": "high"}},
    "unknown cache": {"prompt": "x", "cache": "nope"},
    "block_length": {"prompt": "x", "block_length": 0},
    "steps": {"prompt": "x", "max_tokens": 16, "block_length": 8, "steps": 3},
    "max_tokens": {"prompt": "x", "max_tokens": 0},
    "n": {"prompt": "x", "n": 0},
    "seed": {"prompt": "x", "seed": -1},
    "temperature": {"prompt": "x", "temperature": -1},
    "top_p": {"prompt": "x", "top_p": 2},
    "stop": {"prompt": "x", "stop": 3},
    "stop token id": {"prompt": "x", "stop_token_ids": [10**9]},
    "empty prompt": {"prompt": ""},
    "prompt too long": {"prompt": "x " * 600},
    "token id": {"prompt": [10**9]},
    "unknown field": {"prompt": "x", "temprature": 1},
    "gen_length": {"prompt": "x", "gen_length": 64},
    "unsupported": {"prompt": "x", "best_of": 3},
    "logprobs": {"prompt": "x", "logprobs": 99},
    "logprobs strategy": {"prompt": "x", "logprobs": 1, "strategy": "freedave"},
    "lone surrogate": {"prompt": "a\ud800b"},
    "lone surrogate stop": {"prompt": "x", "stop": ["\udfff"]},
    "prompt chars": {"prompt": "x" * 20000},
    "rows": {"prompt": ["a", "b"], "n": 40},
    "memory budget": {"prompt": "x", "memory_budget_mb": 0.001},
    "echo": {"prompt": "x", "echo": "yes"},
    "stream": {"prompt": "x", "stream": 1},
}


@pytest.mark.parametrize("kind", sorted(BAD_REQUESTS))
def test_bad_request_is_400_before_any_model_work(server, kind):
    url, scheduler = server
    before = len(scheduler.submitted)
    body = json.dumps({"model": "dllm-test", **BAD_REQUESTS[kind]})  # ASCII: a lone surrogate goes as \ud800
    r = httpx.post(url + "/v1/completions", content=body, headers=JSON, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"]
    assert len(scheduler.submitted) == before


def test_bad_chat_and_body_are_400(server, client):
    url = server[0]
    assert httpx.post(url + "/v1/completions", content=b"{not json", headers=JSON, timeout=30).status_code == 400
    bad = httpx.post(url + "/v1/chat/completions", json={"messages": [{"role": "user"}]}, timeout=30)
    assert bad.status_code == 400 and "content" in bad.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError, match="no_such_rule"):
        client.chat.completions.create(model="dllm-test", messages=MESSAGES, extra_body={"policy": "no_such_rule"})
    with pytest.raises(openai.NotFoundError, match="dllm-test"):
        client.completions.create(model="other-model", prompt="x")


@pytest.fixture(scope="module")
def slow_model(tiny_dirs):
    """A random tiny model: no end-of-text in its first 128 tokens, so a row runs until told."""
    return dllm.load(tiny_dirs["llada"])


LONG = {"prompt": "hello world", "max_tokens": 128, "block_length": 32, "stream": True}


def test_queue_full_is_429_with_retry_after(slow_model):
    scheduler = RecordingScheduler(slow_model, SchedulerLimits(max_batch=1, max_queue=1))
    try:
        with running_server(create_app(slow_model, scheduler, defaults=DEFAULTS)) as url:
            with httpx.stream("POST", url + "/v1/completions", json=LONG, timeout=60):
                assert wait_until(lambda: scheduler.running_rows == 1)
                with concurrent.futures.ThreadPoolExecutor(1) as pool:
                    waiting = pool.submit(httpx.post, url + "/v1/completions",
                                          json={"prompt": "hi", "max_tokens": 8}, timeout=60)
                    assert wait_until(lambda: scheduler.queue_depth == 1)
                    r = httpx.post(url + "/v1/completions", json={"prompt": "hi"}, timeout=30)
                    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
                    assert r.json()["error"]["type"] == "rate_limit_exceeded"  # OpenAI's error type for 429
                    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
                    with pytest.raises(openai.RateLimitError):
                        client.completions.create(model=slow_model.path.name, prompt="hi")
                # the long stream is closed here: its row leaves, the waiting request runs
                assert waiting.result().status_code == 200
            assert len(scheduler.submitted) == 2  # the refused requests never reached a row
    finally:
        scheduler.close()


def test_disconnect_mid_stream_frees_the_row(slow_model):
    scheduler = RecordingScheduler(slow_model, SchedulerLimits(max_batch=4, max_queue=8))
    try:
        with running_server(create_app(slow_model, scheduler, defaults=DEFAULTS)) as url:
            with httpx.stream("POST", url + "/v1/completions", json=LONG, timeout=60) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        choice = json.loads(line[6:])["choices"][0]
                        assert choice["finish_reason"] is None
                        if choice["text"]:
                            break  # text arrived, the row is running: leave
            row_id = scheduler.submitted[-1].request_id
            assert wait_until(lambda: scheduler.finished.get(row_id) == "cancelled", timeout=15)
            assert wait_until(lambda: scheduler.running_rows == 0)
            assert 'dllm_rows_finished_total{reason="cancelled"} 1.0' in httpx.get(url + "/metrics").text
            client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
            out = client.completions.create(model=slow_model.path.name, prompt="hello world", max_tokens=8)
            assert out.choices[0].text == expected(slow_model, raw_ids(slow_model, "hello world"), max_tokens=8).text
    finally:
        scheduler.close()


def test_models_health_and_metrics(server, client):
    url = server[0]
    assert [m.id for m in client.models.list().data] == ["dllm-test"]
    assert httpx.get(url + "/health").json()["status"] == "ok"
    client.completions.create(model="dllm-test", prompt=PROMPT, max_tokens=8)
    text = httpx.get(url + "/metrics").text
    for name in ("dllm_requests_total", "dllm_queue_depth", "dllm_running_rows", "dllm_generated_tokens_total",
                 "dllm_nfe_total", "dllm_tpf_bucket", "dllm_ttft_seconds_bucket", "dllm_request_latency_seconds_bucket"):
        assert name in text, name


def test_concurrent_mixed_requests_equal_single_generate_calls(model, client):
    """32 requests at once, mixed prompts and settings: each answer is its own single run's."""
    prompts = [PROMPT, "Reverse: Ann Lee, Tom Kay", "Sort: Zed Moe, Al Bo, Kim Su", "Who is first? Eve Day"]
    settings = [{}, {"policy": "threshold", "policy_args": {"tau": 0.7}}, {"temperature": 0.8, "seed": 3},
                {"block_length": 4}]
    jobs = [(prompts[i % 4], settings[(i // 4) % 4], 4 + 4 * (i % 3)) for i in range(32)]

    def one(job):
        prompt, extra, max_tokens = job
        body = {k: v for k, v in extra.items() if k not in ("temperature", "seed")}
        out = client.completions.create(model="dllm-test", prompt=prompt, max_tokens=max_tokens,
                                        temperature=extra.get("temperature"), seed=extra.get("seed"),
                                        extra_body=body)
        return out.choices[0].text

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        got = list(pool.map(one, jobs))
    for (prompt, extra, max_tokens), text in zip(jobs, got):
        assert text == expected(model, raw_ids(model, prompt), max_tokens=max_tokens, **extra).text
