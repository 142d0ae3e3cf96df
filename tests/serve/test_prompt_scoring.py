"""What a client scoring text asks of /v1/completions, as OpenAI and vLLM answer it: ``logprobs: 0``
still gives each token a ``top_logprobs`` entry holding the token itself (up to logprobs + 1
entries), and ``echo`` with ``max_tokens: 0`` returns the prompt with its logprobs and no answer
(lm-eval's loglikelihood requests)."""
from __future__ import annotations

import json

import httpx
import pytest

from dllm.serve.app import create_app
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import ServerDefaults
from serve_helpers import RecordingScheduler, running_server

PROMPT = "hello world, the list is long"


@pytest.fixture(scope="module")
def served(tiny_models):
    """(model, scheduler, url) of a server on the tiny LLaDA-layout model."""
    model = tiny_models["llada"]
    scheduler = RecordingScheduler(model, SchedulerLimits(max_batch=4, max_queue=8))
    app = create_app(model, scheduler, defaults=ServerDefaults(options={"block_length": 8}, max_tokens=8),
                     served_name="m")
    try:
        with running_server(app) as url:
            yield model, scheduler, url
    finally:
        scheduler.close()


def post(url: str, **body) -> httpx.Response:
    return httpx.post(url + "/v1/completions", json={"model": "m", "prompt": PROMPT, "seed": 1, **body}, timeout=60)


def test_logprobs_zero_gives_each_token_its_own_entry(served):
    model, _, url = served
    choice = post(url, max_tokens=6, logprobs=0).json()["choices"][0]
    lp = choice["logprobs"]
    tokens = [model.tokenizer.decode([t], skip_special_tokens=False) for t in choice["dllm"]["token_ids"]]
    assert lp["tokens"] == tokens
    assert lp["top_logprobs"] == [{t: v} for t, v in zip(tokens, lp["token_logprobs"])]
