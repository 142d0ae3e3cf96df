"""Limits under abuse (issue 31): oversized bodies are 413 before they are read, half-sent
requests are dropped after a deadline, long prompts and many rows are refused before the
tokenizer sees them, tokenizing runs off the event loop, and /health keeps answering in its usual
time while all that is refused; every bad request is a JSON 4xx, never a 500."""
from __future__ import annotations

import concurrent.futures
import json
import threading
import time

import httpx
import openai
import pytest

import dllm
from dllm.bench.raw_http import head, raw_exchange, status_of
from dllm.serve.app import create_app
from dllm.serve.connections import header_deadline_protocol
from dllm.serve.limits import ServerLimits
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import ServerDefaults
from dllm.serve.scheduler import BatchScheduler
from serve_helpers import running_server

DEFAULTS = ServerDefaults(options={"block_length": 8}, max_tokens=16)
LIMITS = ServerLimits(max_body_bytes=1 << 20, body_timeout_s=0.5, header_timeout_s=0.5, max_rows_per_request=16)
JSON = {"Content-Type": "application/json"}
MB = 1 << 20


@pytest.fixture(scope="module")
def model():
    return dllm.load()


@pytest.fixture(scope="module")
def served(model):
    """(url, port, encoded prompts): a server with small limits; ``encoded`` counts the prompts
    the tokenizer was given."""
    encoded = []
    encode = model.encode

    def counting_encode(prompt, chat=None):
        encoded.append(len(prompt) if isinstance(prompt, str) else sum(len(m["content"]) for m in prompt))
        return encode(prompt, chat=chat)

    model.encode = counting_encode
    scheduler = BatchScheduler(model, SchedulerLimits(max_batch=4, max_queue=8))
    try:
        app = create_app(model, scheduler, defaults=DEFAULTS, served_name="m", limits=LIMITS)
        with running_server(app, http=header_deadline_protocol(LIMITS.header_timeout_s)) as url:
            yield url, int(url.rsplit(":", 1)[1]), encoded
    finally:
        scheduler.close()
        del model.encode


def health_latencies(url: str, count: int = 20) -> list[float]:
    """Seconds of ``count`` /health calls, 20 ms apart."""
    seconds = []
    with httpx.Client(timeout=30) as client:
        for _ in range(count):
            start = time.perf_counter()
            assert client.get(url + "/health").status_code == 200
            seconds.append(time.perf_counter() - start)
            time.sleep(0.02)
    return seconds


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def test_announced_50mb_body_is_413_before_it_is_read(served):
    url, port, _ = served
    answer = raw_exchange(port, head(port, length=50 * MB) + b'{"prompt": "', timeout=5)
    assert status_of(answer) == 413 and b"--max-body-mb" in answer and b"connection: close" in answer.lower()


def test_streamed_body_is_413_once_it_passes_the_limit_and_health_stays_fast(served):
    """Chunked 50 MB bodies (no Content-Length) from 5 threads at once, at most 40: each is cut at
    the limit; /health answers in its usual time meanwhile and the memory comes back."""
    url, port, _ = served
    chunk = b"%x\r\n%s\r\n" % (MB, b"x" * MB)
    baseline = health_latencies(url)
    before = rss_mb()
    stop, answers = threading.Event(), []

    def abuse() -> None:
        while not stop.is_set() and len(answers) < 40:
            answers.append(raw_exchange(port, head(port, chunked=True), more=chunk, chunks=50))

    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        abusers = [pool.submit(abuse) for _ in range(5)]
        time.sleep(0.1)
        latencies = health_latencies(url)
        stop.set()
        for a in abusers:
            a.result()
    assert answers and all(status_of(a) == 413 for a in answers), [a[:60] for a in answers]
    assert max(latencies) < max(0.5, 20 * max(baseline)), (max(latencies), max(baseline))
    assert rss_mb() - before < 64  # at most the limit per connection was ever held


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_of_exactly_the_limit_is_read(served, chunked):
    """max_body_bytes is the most a body may have: exactly that many bytes reach the request parser
    (a 400 for its max_tokens here), one more is a 413, announced (Content-Length) or streamed."""
    url = served[0]
    body = b'{"prompt": "hi", "max_tokens": -1}'
    exact = body + b" " * (MB - len(body))

    def send(data: bytes) -> int:
        content = iter([data[: MB // 2], data[MB // 2 :]]) if chunked else data
        return httpx.post(url + "/v1/completions", content=content, headers=JSON, timeout=30).status_code

    assert send(exact) == 400 and send(exact + b" ") == 413


def test_openai_client_gets_413_for_a_huge_prompt(served):
    client = openai.OpenAI(base_url=served[0] + "/v1", api_key="unused", max_retries=0, timeout=30)
    with pytest.raises(openai.APIStatusError) as err:
        client.completions.create(model="m", prompt="x" * (2 * MB), max_tokens=4)
    assert err.value.status_code == 413 and "--max-body-mb" in err.value.message


def test_half_sent_bodies_are_dropped_after_the_deadline(served):
    url, port, _ = served
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda _: raw_exchange(port, head(port, length=1000) + b'{"prompt": "abc'),
                                range(20)))
    assert all(status_of(a) == 408 and b"did not arrive" in a for a in answers)
    assert time.monotonic() - start < 5  # the deadline is 0.5 s
    assert httpx.get(url + "/health").status_code == 200


def test_half_sent_headers_are_dropped_after_the_deadline(served):
    port = served[1]
    start = time.monotonic()
    answer = raw_exchange(port, b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty", timeout=5)
    assert answer == b"" and time.monotonic() - start < 3  # closed by the server, not by our timeout


def test_long_prompt_and_many_rows_are_refused_before_tokenizing(served, model):
    url, _, encoded = served
    context = model.model.config.max_sequence_length
    cases = [({"prompt": "x" * (LIMITS.max_prompt_chars(context) + 1)}, "characters"),
             ({"messages": [{"role": "user", "content": "y" * (LIMITS.max_prompt_chars(context) + 1)}]}, "characters"),
             ({"prompt": ["a"] * 100_000}, "--max-rows-per-request"),
             ({"prompt": ["a", "b", "c"], "n": 4}, "--max-queue")]  # 12 rows: within 16 per request, over 8 queued
    for body, fix in cases:
        chat = "messages" in body
        before = len(encoded)
        r = httpx.post(url + ("/v1/chat/completions" if chat else "/v1/completions"), json=body, timeout=30)
        assert r.status_code == 400 and fix in r.json()["error"]["message"], r.text
        assert len(encoded) == before  # refused before the tokenizer saw it


def test_rows_that_never_fit_the_queue_are_400_not_429(served):
    """The openai client retries a 429 (for ever with max_retries); a request that can never be
    queued must not look like a full queue."""
    client = openai.OpenAI(base_url=served[0] + "/v1", api_key="unused", max_retries=0, timeout=30)
    with pytest.raises(openai.BadRequestError, match="could never be queued"):
        client.completions.create(model="m", prompt=["a", "b"], n=5, max_tokens=4)


def test_tokenizing_runs_off_the_event_loop(served, model):
    """/health is answered while a request's tokenizer call is still running: the call is held
    until /health has answered, so on the event loop it would hold /health to its timeout (no
    time bound to miss on a loaded machine)."""
    url = served[0]
    encode = model.encode
    started, release = threading.Event(), threading.Event()

    def held_encode(prompt, chat=None):
        started.set()
        release.wait(30)
        return encode(prompt, chat=chat)

    model.encode = held_encode
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            slow = pool.submit(httpx.post, url + "/v1/completions", json={"prompt": "hi", "max_tokens": 4}, timeout=60)
            assert started.wait(30), "the request never reached the tokenizer"
            try:
                assert httpx.get(url + "/health", timeout=10).status_code == 200
                assert not release.is_set() and not slow.done()  # answered while the tokenizer held
            finally:
                release.set()
            assert slow.result().status_code == 200
    finally:
        model.encode = encode


@pytest.mark.parametrize("body", [{"prompt": "a\ud800b"}, {"prompt": ["ok", "\udfff"]},
                                  {"messages": [{"role": "user", "content": "hi \ud800"}]},
                                  {"messages": [{"role": "user", "content": [{"type": "text", "text": "\ud800"}]}]}])
def test_lone_surrogates_are_400_and_the_connection_stays_usable(served, body):
    url = served[0]
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    with httpx.Client(timeout=30) as client:
        r = client.post(url + path, content=json.dumps(body), headers=JSON)  # ASCII: \ud800 escaped
        assert r.status_code == 400 and "surrogate" in r.json()["error"]["message"]
        assert client.get(url + "/health").status_code == 200  # the same kept-alive connection
    assert 'dllm_requests_total{endpoint="' in httpx.get(url + "/metrics").text


def test_memory_budget_is_checked_per_request_at_admission(model):
    """A budget that holds one row but not two: eight such requests at once all succeed (the
    scheduler batches no more rows than fit), and a request whose one row never fits is a 400."""
    from dllm.engine.memory import MIB, plan_memory
    from dllm.serve.requests import parse_request

    parsed = parse_request({"prompt": "hello there", "max_tokens": 16}, model, DEFAULTS, chat=False, served_name="m")
    length = len(parsed.prompt_ids[0]) + 4 + parsed.config.gen_length  # room for slightly longer prompts
    one, two = (plan_memory(model.model, rows, length, parsed.config).total_bytes / MIB for rows in (1, 2))
    budget = (one + two) / 2
    scheduler = BatchScheduler(model, SchedulerLimits(max_batch=8, max_queue=16))
    try:
        with running_server(create_app(model, scheduler, defaults=DEFAULTS, served_name="m")) as url:
            client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)

            def one_request(i):
                return client.completions.create(model="m", prompt="hello there", max_tokens=16, seed=i,
                                                 extra_body={"memory_budget_mb": budget}).choices[0].finish_reason

            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                assert all(reason in ("stop", "length") for reason in pool.map(one_request, range(8)))
            with pytest.raises(openai.BadRequestError, match="memory_budget_mb"):
                client.completions.create(model="m", prompt="hello there", max_tokens=16,
                                          extra_body={"memory_budget_mb": one / 2})
    finally:
        scheduler.close()
