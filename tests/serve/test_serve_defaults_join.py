"""Under the server's defaults requests of different lengths share running batches (issue 37,
item 2): a request's block is the server's default block, not one block of its max_tokens, so an
8-token request sent during a long one joins or runs beside it at once instead of waiting for it
to drain. Measured with ``dllm bench serve``'s --behind scenario on a real server (127.0.0.1)."""
from __future__ import annotations

import argparse
import asyncio

import pytest

import dllm
from dllm.bench.serve_load import behind_bodies, behind_run, block_option
from dllm.serve.app import create_app
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import DEFAULT_BLOCK_LENGTH, ServerDefaults, parse_request
from serve_helpers import RecordingScheduler, running_server

LONG = 320  # the long answer's tokens, one per step: seconds of work on the tiny model, so the 0.5 s delay lands early in it


def test_requests_of_every_length_share_one_batch_key():
    model = dllm.load()
    from dllm.serve.running_batch import batch_key

    keys = set()
    for max_tokens in (8, 32, 100, 384):
        parsed = parse_request({"prompt": "Who is second: Ann Lee, Tom Kay", "max_tokens": max_tokens}, model,
                               ServerDefaults(), chat=False, served_name="m")
        config = parsed.config
        assert config.block_length == DEFAULT_BLOCK_LENGTH
        assert config.gen_length == -(-max_tokens // DEFAULT_BLOCK_LENGTH) * DEFAULT_BLOCK_LENGTH
        keys.add(batch_key(config, model.model))
    assert len(keys) == 1 and next(iter(keys))[1]  # one key, joinable


def test_block_option_of_the_load_generator():
    assert block_option(None, 64) == {}
    assert block_option("max", 64) == {"block_length": 64}
    assert block_option(8, 64) == {"block_length": 8}


@pytest.mark.parametrize("block", [None, "max"], ids=["server_default", "one_block_per_request"])
def test_a_short_request_behind_a_long_one(tiny_dirs, block):
    """At the old default (one block per request) the short request has a batch key of its own
    and waits for the long one to drain; under the server's defaults it joins (or runs beside)
    the long one at once. A tiny random model: its answers hold no early end-of-text, so the
    long request stays long."""
    model = dllm.load(tiny_dirs["llada"], dtype="float32")
    scheduler = RecordingScheduler(model, SchedulerLimits(max_batch=8, max_queue=64))
    args = argparse.Namespace(behind=(LONG, 8), policy="low_confidence", cache="none", seed=0, block_length=block)
    long_body, short_body = behind_bodies(args)
    try:
        with running_server(create_app(model, scheduler, defaults=ServerDefaults())) as url:
            result = asyncio.run(behind_run(url, long_body, short_body, delay=0.5, timeout=300))
    finally:
        scheduler.close()
    assert result["long_tokens"] == LONG
    waited = result["short_behind_latency_s"]
    # the long one still had most of its LONG steps to go when the short one came
    if block is None:
        assert waited < result["long_latency_s"] - 0.5, result
    else:  # a key of its own (block 8): queued until the long batch drained
        assert waited > result["long_latency_s"] - 0.5 - 0.5, result
