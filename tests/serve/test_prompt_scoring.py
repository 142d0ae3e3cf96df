"""What a client scoring text asks of /v1/completions, as OpenAI and vLLM answer it: ``logprobs: 0``
still gives each token a ``top_logprobs`` entry holding the token itself (up to logprobs + 1
entries), and ``echo`` with ``max_tokens: 0`` returns the prompt with its logprobs and no answer
(lm-eval's loglikelihood requests)."""
from __future__ import annotations

import json

import httpx
import pytest
import torch

from dllm.serve.requests import ServerDefaults
from serve_helpers import RecordingScheduler, served_model

PROMPT = "hello world, the list is long"


@pytest.fixture(scope="module")
def served(tiny_models):
    """(model, scheduler, url) of a server on the tiny LLaDA-layout model."""
    model = tiny_models["llada"]
    with served_model(model, ServerDefaults(options={"block_length": 8}, max_tokens=8), RecordingScheduler) as (
            scheduler, url):
        yield model, scheduler, url


def post(url: str, **body) -> httpx.Response:
    return httpx.post(url + "/v1/completions", json={"model": "m", "prompt": PROMPT, "seed": 1, **body}, timeout=60)


def test_logprobs_zero_gives_each_token_its_own_entry(served):
    model, _, url = served
    choice = post(url, max_tokens=6, logprobs=0).json()["choices"][0]
    lp = choice["logprobs"]
    tokens = [model.tokenizer.decode([t], skip_special_tokens=False) for t in choice["dllm"]["token_ids"]]
    assert lp["tokens"] == tokens
    assert lp["top_logprobs"] == [{t: v} for t, v in zip(tokens, lp["token_logprobs"])]


def prompt_alone_logprobs(model, ids: list[int]) -> list[float]:
    """Logprobs of ids[1:] from one forward of the prompt alone (no masked answer after it), read
    at the LLaDA layout (logit i from output i)."""
    lm = model.model
    tokens = torch.tensor([ids], device=lm.device)
    with torch.no_grad():
        logp = torch.log_softmax(lm(tokens, torch.arange(len(ids), device=lm.device)[None])[0].double(), dim=-1)
    return [float(logp[i, t]) for i, t in enumerate(ids) if i > 0]


def test_echo_with_max_tokens_zero_scores_the_prompt_without_decoding(served):
    model, scheduler, url = served
    ids = model.encode(PROMPT, chat=False)
    before = len(scheduler.submitted)
    out = post(url, max_tokens=0, echo=True, logprobs=1, n=2).json()
    assert len(scheduler.submitted) == before  # no row reached the scheduler
    assert out["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 0, "total_tokens": len(ids)}
    for choice in out["choices"]:
        assert choice["text"] == PROMPT and choice["finish_reason"] == "length"
        assert choice["dllm"]["token_ids"] == [] and choice["dllm"]["stats"]["nfe"] == 0
        lp = choice["logprobs"]
        assert lp["tokens"] == [model.tokenizer.decode([t], skip_special_tokens=False) for t in ids]
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        assert lp["token_logprobs"][1:] == pytest.approx(prompt_alone_logprobs(model, ids), abs=1e-4)
    plain = post(url, max_tokens=0, echo=True).json()["choices"][0]
    assert plain["text"] == PROMPT and plain["logprobs"] is None


def test_echo_with_max_tokens_zero_streams(served):
    model, _, url = served
    body = {"model": "m", "prompt": PROMPT, "max_tokens": 0, "echo": True, "logprobs": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    choices = [e["choices"][0] for e in events if e["choices"]]
    assert "".join(c["text"] for c in choices) == PROMPT
    assert [c["finish_reason"] for c in choices][-1] == "length"
    assert sum(len(c["logprobs"]["tokens"]) for c in choices) == len(model.encode(PROMPT, chat=False))
    assert events[-1]["usage"]["completion_tokens"] == 0


def test_max_tokens_zero_without_echo_is_refused_naming_echo(served):
    _, _, url = served
    r = post(url, max_tokens=0)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "max_tokens" and "echo" in error["message"]


def test_a_prompt_past_the_context_with_max_tokens_zero_names_only_the_prompt(served):
    model, _, url = served
    context = model.model.config.max_sequence_length
    r = httpx.post(url + "/v1/completions", json={"model": "m", "prompt": [5] * (context + 1), "max_tokens": 0,
                                                  "echo": True}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    assert r.json()["error"]["message"].endswith("shorten the prompt")  # no max_tokens lower than 0
    assert httpx.post(url + "/v1/completions", json={"model": "m", "prompt": [5] * context, "max_tokens": 0,
                                                     "echo": True}, timeout=60).status_code == 200
