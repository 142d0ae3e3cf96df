"""``echo`` with ``logprobs`` on /v1/completions gives the prompt's tokens their log-probabilities
too (issue 37), as OpenAI and vLLM do: the first token's null, each other the log-softmax at its
position of one forward of the prompt with the answer masked. Checked against the model's own
forward and log_softmax computed here, for a LLaDA-layout model (logit i from output i) and a
Dream-layout one (logit i from output i - 1): reading the other family's alignment fails."""
from __future__ import annotations

import json

import httpx
import openai
import pytest
import torch

from dllm.serve.app import create_app
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import ServerDefaults
from dllm.serve.scheduler import BatchScheduler
from serve_helpers import running_server

BLOCK, GEN, TOP = 8, 8, 2
PROMPT = "hello world, the list is long"
TOL = 1e-4


@pytest.fixture(scope="module", params=["llada", "dream"])
def served(request, tiny_models):
    """(family, model, url) of a server on a tiny model of each family."""
    model = tiny_models[request.param]
    scheduler = BatchScheduler(model, SchedulerLimits(max_batch=4, max_queue=8))
    app = create_app(model, scheduler, defaults=ServerDefaults(options={"block_length": BLOCK}, max_tokens=GEN),
                     served_name="m")
    try:
        with running_server(app) as url:
            yield request.param, model, url
    finally:
        scheduler.close()


def expected(model, ids: list[int], top: int) -> tuple[list[float], list[dict[str, float]]]:
    """Logprobs of ids[1:] and their top alternatives from one plain forward of the prompt and
    GEN mask tokens, read with the family's shift."""
    lm = model.model
    tokens = torch.tensor([ids + [lm.mask_token_id] * GEN], device=lm.device)
    positions = torch.arange(tokens.shape[1], device=lm.device)[None]
    with torch.no_grad():
        logp = torch.log_softmax(lm(tokens, positions)[0].double(), dim=-1)
    shift = 1 if lm.shift_logits else 0
    rows = [logp[i - shift] for i in range(1, len(ids))]
    values = [float(row[t]) for row, t in zip(rows, ids[1:])]
    tops = []
    for row in rows:
        v, i = row.topk(top)
        top_row: dict[str, float] = {}
        for t, x in zip(i.tolist(), v.tolist()):  # of tokens spelled alike, the most likely
            top_row.setdefault(model.tokenizer.decode([t], skip_special_tokens=False), x)
        tops.append(top_row)
    return values, tops


def test_echo_logprobs_hold_the_prompt_tokens(served):
    family, model, url = served
    ids = model.encode(PROMPT, chat=False)
    P = len(ids)
    assert P >= 4
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
    echoed = client.completions.create(model="m", prompt=PROMPT, echo=True, logprobs=TOP, max_tokens=GEN, seed=3)
    plain = client.completions.create(model="m", prompt=PROMPT, logprobs=TOP, max_tokens=GEN, seed=3)
    lp, answer = echoed.choices[0].logprobs, plain.choices[0].logprobs
    assert echoed.choices[0].text == PROMPT + plain.choices[0].text
    assert lp.tokens[:P] == [model.tokenizer.decode([t], skip_special_tokens=False) for t in ids]
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None  # nothing precedes the first token
    values, tops = expected(model, ids, TOP)
    assert lp.token_logprobs[1:P] == pytest.approx(values, abs=TOL)
    for served_top, token, value, want in zip(lp.top_logprobs[1:P], lp.tokens[1:P], values, tops):
        # the prompt's token first, then the TOP most likely (up to TOP + 1, as OpenAI); a like-spelled one is the token's
        want = {token: value} | {k: v for k, v in want.items() if k != token}
        assert served_top.keys() == want.keys() and list(served_top.values()) == pytest.approx(list(want.values()),
                                                                                                abs=TOL)
    assert lp.text_offset[:P] == [len(model.tokenizer.decode(ids[:p], skip_special_tokens=False)) for p in range(P)]
    # then the answer's own entries, unchanged but for their offsets after the echoed prompt
    assert lp.tokens[P:] == answer.tokens and lp.token_logprobs[P:] == pytest.approx(answer.token_logprobs)
    assert lp.text_offset[P:] == [len(PROMPT) + o for o in answer.text_offset]


def test_the_other_familys_alignment_would_not_match(served):
    """The test above can fail: the wrong shift gives other values on these models."""
    family, model, url = served
    ids = model.encode(PROMPT, chat=False)
    values, _ = expected(model, ids, 1)
    model.model.config.shift_logits = not model.model.config.shift_logits
    try:
        wrong, _ = expected(model, ids, 1)
    finally:
        model.model.config.shift_logits = not model.model.config.shift_logits
    assert max(abs(a - b) for a, b in zip(values, wrong)) > 100 * TOL


def test_streamed_echo_carries_the_prompt_logprobs_first(served):
    family, model, url = served
    body = {"model": "m", "prompt": PROMPT, "echo": True, "logprobs": TOP, "max_tokens": GEN, "seed": 3}
    whole = httpx.post(url + "/v1/completions", json=body, timeout=60).json()["choices"][0]["logprobs"]
    chunks = []
    with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:])["choices"][0])
    assert chunks[0]["text"] == PROMPT and chunks[0]["logprobs"]["token_logprobs"][0] is None
    joined = {k: [v for c in chunks if c["logprobs"] for v in c["logprobs"][k]] for k in whole}
    assert joined["tokens"] == whole["tokens"] and joined["text_offset"] == whole["text_offset"]
    assert joined["token_logprobs"] == pytest.approx(whole["token_logprobs"])


def test_echo_without_logprobs_and_logprobs_without_echo_are_unchanged(served):
    family, model, url = served
    body = {"model": "m", "prompt": PROMPT, "max_tokens": GEN, "seed": 3}
    assert httpx.post(url + "/v1/completions", json={**body, "echo": True}, timeout=60).json()["choices"][0][
        "logprobs"] is None
    lp = httpx.post(url + "/v1/completions", json={**body, "logprobs": 0}, timeout=60).json()["choices"][0]["logprobs"]
    assert lp["text_offset"][0] == 0


def test_tensor_parallel_refuses_echo_with_logprobs(tiny_models):
    """Rank 0 alone cannot run a sharded forward: the request is a 400 before any model work."""
    from dllm.serve.requests import RequestError, parse_request

    model = tiny_models["llada"]
    body = {"prompt": PROMPT, "echo": True, "logprobs": 1, "max_tokens": GEN, "block_length": BLOCK}
    model.model.tensor_parallel = object()  # only read by the check: no forward runs
    try:
        with pytest.raises(RequestError, match="tensor-parallel.*drop echo or logprobs") as err:
            parse_request(body, model, ServerDefaults(), chat=False, served_name="m")
        assert err.value.param == "echo"
        parse_request({**body, "echo": False}, model, ServerDefaults(), chat=False, served_name="m")
    finally:
        model.model.tensor_parallel = None
