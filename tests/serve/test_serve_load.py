"""The load generator of ``dllm bench serve``: Poisson arrivals against a server on loopback,
cancellations, and the summary it reports."""
from __future__ import annotations

import asyncio

import pytest

import dllm
from dllm.bench.serve_load import Outcome, bench_prompts, percentile, poisson_run, summarize
from dllm.serve.app import create_app
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.scheduler import BatchScheduler
from serve_helpers import running_server


def test_percentile_and_summary():
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0 and percentile([1.0, 2.0, 3.0], 99) == 3.0
    outcomes = [Outcome(sent=0, status=200, ttft=0.1, latency=1.0, tokens=4), Outcome(sent=0, status=429),
                Outcome(sent=0, cancelled=True)]
    s = summarize(outcomes, wall=2.0)
    assert (s["completed"], s["rejected_429"], s["cancelled"]) == (1, 1, 1)
    assert s["throughput_tokens_per_s"] == 2.0 and s["latency_p99_s"] == 1.0


def test_an_answer_of_only_end_of_text_has_a_ttft():
    """Its stream carries no text: the one chunk that ends it is the first token the client sees."""
    import json

    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse

    app = FastAPI()
    app.get("/health")(lambda: {"status": "ok"})

    @app.post("/v1/completions")
    async def completions():
        chunk = {"choices": [{"index": 0, "text": "", "finish_reason": "stop",
                              "dllm": {"token_ids": [0], "finish_reason": "eos"}}]}
        return StreamingResponse(iter([f"data: {json.dumps(chunk)}\n\n", "data: [DONE]\n\n"]),
                                 media_type="text/event-stream")

    with running_server(app) as url:
        outcomes, wall = asyncio.run(poisson_run(url, [{"prompt": "x"}], rate=50.0, duration=5, timeout=10, seed=0))
    (outcome,) = outcomes
    assert outcome.finish_reason == "eos" and outcome.token_ids == [0]
    assert outcome.ttft is not None and outcome.ttft <= outcome.latency
    assert summarize(outcomes, wall)["ttft_p50_s"] == outcome.ttft


def test_prompts_are_reproducible_and_ragged():
    assert bench_prompts(8, 1) == bench_prompts(8, 1)
    assert len({len(p) for p in bench_prompts(20, 1)}) > 1


def test_poisson_run_streams_every_request_and_cancels_some():
    model = dllm.load()
    scheduler = BatchScheduler(model, SchedulerLimits(max_batch=4, max_queue=64))
    bodies = [{"prompt": p, "max_tokens": 8, "block_length": 8} for p in bench_prompts(6, 0)]
    try:
        with running_server(create_app(model, scheduler)) as url:
            outcomes, wall = asyncio.run(poisson_run(url, bodies, rate=20.0, duration=30, timeout=60, seed=0))
            cancelled, _ = asyncio.run(poisson_run(url, bodies, rate=20.0, duration=30, timeout=60, seed=1,
                                                   cancel_prob=1.0))
    finally:
        scheduler.close()
    assert len(outcomes) == 6 and all(o.status == 200 and o.finish_reason for o in outcomes)
    for body, outcome in zip(bodies, outcomes):
        ids = model.generate_ids([model.encode(body["prompt"], chat=False)], max_tokens=8, block_length=8).token_ids[0]
        assert outcome.token_ids == ids
        assert outcome.ttft is not None and outcome.ttft <= outcome.latency
    assert summarize(outcomes, wall)["completed"] == 6
    assert all(o.cancelled or o.finish_reason for o in cancelled)
    assert any(o.cancelled for o in cancelled)  # closed after 0-2 chunks: mid-stream, whatever the speed


@pytest.mark.parametrize("argv", [["--rates", "0,1"], ["--modes", "dynamic"]])
def test_bad_options_are_refused(argv, capsys):
    from dllm.cli import main

    with pytest.raises(SystemExit) as err:
        main(["bench", "serve", "--out", "x", *argv])
    assert err.value.code == 2


def test_a_transport_error_is_one_failed_request_not_a_failed_run():
    from dllm.bench.serve_load import free_port

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    outcomes, wall = asyncio.run(poisson_run(url, [{"prompt": "x"}] * 2, rate=50.0, duration=5, timeout=5, seed=0))
    assert [o.error is not None for o in outcomes] == [True, True]
    assert summarize(outcomes, wall)["transport_errors"] == 2
