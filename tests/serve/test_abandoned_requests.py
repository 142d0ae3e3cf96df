"""A client that leaves a long request (a stream it closes, a whole request it stops waiting for)
costs the server nothing from the next step on: its rows stop, and the next request starts at
once. Through the real openai client on 127.0.0.1, on a tiny random model whose greedy answer to
the prompt starts with no end-of-text (checked on its first 64 tokens), so only the cancel ends it. Its
forward is slowed to a GPU-sized model's step (20 ms), so that, as on a real model, a client
leaves while a step runs, not between steps."""
from __future__ import annotations

import time

import httpx
import openai
import pytest

import dllm
from dllm.serve.app import create_app
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import ServerDefaults
from serve_helpers import RecordingScheduler, running_server, wait_until

PROMPT = "The cat sat"
# one block, as the repro (a block boundary would drop the rows anyway)
LONG = {"max_tokens": 960, "n": 2, "temperature": 0.0, "stop_at_eos": False, "block_length": 960, "steps": 960}
EXTRA = {k: v for k, v in LONG.items() if k not in ("max_tokens", "n", "temperature")}  # dllm's own fields
SHORT = {"prompt": "Hi", "max_tokens": 8}


STEP_SECONDS = 0.02


@pytest.fixture(scope="module")
def served(tiny_dirs):
    model = dllm.load(tiny_dirs["llada"], dtype="float32")  # its own copy: the forward is wrapped
    forward = model.model.forward

    def slow_forward(*args, **kwargs):
        time.sleep(STEP_SECONDS)
        return forward(*args, **kwargs)

    start = model.encode(PROMPT, chat=False)
    head = model.generate_ids([start], gen_length=64, block_length=64, steps=64, stop_at_eos=False).token_ids[0]
    assert not set(head) & set(model.model.eos_token_ids), "the long answer would end by itself"
    model.model.forward = slow_forward
    scheduler = RecordingScheduler(model, SchedulerLimits(max_batch=8, max_queue=64))
    try:
        with running_server(create_app(model, scheduler, defaults=ServerDefaults(options={}, max_tokens=32),
                                       served_name="dllm-test")) as url:
            yield url, scheduler
    finally:
        scheduler.close()


def _short_request(url: str) -> tuple[float, float]:
    """(latency, seconds it waited in the scheduler's queue) of a short request."""
    start = time.perf_counter()
    response = httpx.post(url + "/v1/completions", json=SHORT, timeout=60)
    assert response.status_code == 200
    return time.perf_counter() - start, response.json()["choices"][0]["dllm"]["stats"]["queued_seconds"]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_an_abandoned_request_stops_and_the_next_starts_at_once(served, stream):
    url, scheduler = served
    alone = min(_short_request(url)[0] for _ in range(3))
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
    before = set(scheduler.finished)
    if stream:
        chunks = client.completions.create(model="dllm-test", prompt=PROMPT, stream=True,
                                           extra_body=EXTRA,
                                           max_tokens=LONG["max_tokens"], n=LONG["n"], temperature=LONG["temperature"])
        next(iter(chunks))
        chunks.close()
    else:
        quick = client.with_options(timeout=1.0)
        try:  # the client gives up after 1 s; the server sees it leave within its 0.25 s poll
            got = quick.completions.create(model="dllm-test", prompt=PROMPT, extra_body=EXTRA,
                                           max_tokens=LONG["max_tokens"], n=LONG["n"], temperature=LONG["temperature"])
        except openai.APITimeoutError:
            got = None
        assert got is None, f"960 tokens x 2 answered within 1 s: {got}"
    left = time.perf_counter()
    # the server notices within its 0.25 s poll and the rows stop at the next step: no batch is
    # left decoding (undecoded, the two rows take tens of seconds on a CPU)
    assert wait_until(lambda: len(set(scheduler.finished) - before) == 2 and not scheduler.decoding, timeout=30)
    stopped = time.perf_counter() - left
    new = sorted(set(scheduler.finished) - before)
    assert [scheduler.finished[r] for r in new] == ["cancelled", "cancelled"]
    next_latency, queued = _short_request(url)
    assert stopped < 5.0, f"the rows stopped {stopped:.2f} s after the client left (left behind, they decode 960 steps of 20 ms)"
    # it starts at once (behind a left-behind batch it waited 6-15 s on a 2-core CPU); its
    # latency is not bounded here: other processes share the CPU
    assert queued < 0.5, f"the next request waited {queued:.2f} s in the queue ({next_latency:.2f} s in all, alone {alone:.2f} s)"
