"""Served logprobs have the right values, not only a consistent shape: each answer token's
logprob and its top alternatives equal the log-softmax of the forward that committed it,
computed here by LLaDA's own loop (tests/oracles.py) on the same model, for completions, chat,
streaming, top-n and a batch of prompts (issue 44). A tempered or shifted log-softmax fails."""
from __future__ import annotations

import openai
import pytest
import torch

import dllm
from dllm.serve.app import create_app
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import ServerDefaults
from dllm.serve.scheduler import BatchScheduler
from serve_helpers import running_server
from tests.oracles import llada_generate

BLOCK, GEN = 8, 16
PROMPTS = ["Alice Smith, Bob Jones, Carol White. Who is second?", "Bob"]
MESSAGES = [{"role": "user", "content": "Reverse the list: Ann Lee, Tom Kay, Sue Ray"}]
TOL = 1e-4  # float32 engine against the float64 oracle (measured: under 3e-6)


@pytest.fixture(scope="module")
def model():
    return dllm.load()


@pytest.fixture(scope="module")
def client(model):
    scheduler = BatchScheduler(model, SchedulerLimits(max_batch=8, max_queue=32))
    app = create_app(model, scheduler, defaults=ServerDefaults(options={"block_length": BLOCK}, max_tokens=GEN),
                     served_name="m")
    try:
        with running_server(app) as url:
            yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
    finally:
        scheduler.close()


def oracle(model, prompt_ids: list[int]) -> tuple[list[int], dict[int, torch.Tensor]]:
    """LLaDA's loop at one token per step (the server's defaults here): the answer and each
    position's log-softmax under its committing forward."""
    logprobs: dict[int, torch.Tensor] = {}
    answer = llada_generate(model.model, prompt_ids, steps=GEN, gen_length=GEN, block_length=BLOCK,
                            logprobs=logprobs)
    return answer, logprobs


def expected_top(model, logp: torch.Tensor, n: int) -> list[tuple[str, float]]:
    values, ids = logp.topk(n)
    return [(model.decode_text([i]), v) for i, v in zip(ids.tolist(), values.tolist())]


def check_tokens(model, ids: list[int], values: list[float], prompt_ids: list[int]) -> None:
    answer, logprobs = oracle(model, prompt_ids)
    assert 0 < len(ids) == len(values)
    assert ids == answer[: len(ids)]  # the same trajectory (stop_at_eos may end it early)
    want = [logprobs[p][t].item() for p, t in enumerate(ids)]
    assert values == pytest.approx(want, abs=TOL)


@pytest.mark.parametrize("stream", [False, True])
def test_completion_logprob_values(client, model, stream):
    kwargs = dict(model="m", prompt=PROMPTS, max_tokens=GEN, logprobs=3, seed=0)
    if stream:
        chunks = list(client.completions.create(stream=True, **kwargs))
        values = {i: [] for i in range(len(PROMPTS))}
        ids = {}
        for c in chunks:
            for choice in c.choices:
                if choice.logprobs:
                    values[choice.index] += choice.logprobs.token_logprobs
                if choice.finish_reason:
                    ids[choice.index] = choice.dllm["token_ids"]
        for index, prompt in enumerate(PROMPTS):
            check_tokens(model, ids[index], values[index], model.encode(prompt, chat=False))
        return
    out = client.completions.create(**kwargs)
    for choice in out.choices:
        prompt_ids = model.encode(PROMPTS[choice.index], chat=False)
        ids = choice.dllm["token_ids"]
        check_tokens(model, ids, choice.logprobs.token_logprobs, prompt_ids)
        _, logprobs = oracle(model, prompt_ids)
        lp = choice.logprobs
        for position, alternatives in enumerate(lp.top_logprobs):
            # the token itself first, then the 3 most likely: up to logprobs + 1 entries, as OpenAI and vLLM
            token, value = lp.tokens[position], lp.token_logprobs[position]
            want = {token: value} | {k: v for k, v in expected_top(model, logprobs[position], 3) if k != token}
            assert alternatives.keys() == want.keys()
            assert [alternatives[k] for k in want] == pytest.approx(list(want.values()), abs=TOL)


@pytest.mark.parametrize("stream", [False, True])
def test_chat_logprob_values(client, model, stream):
    kwargs = dict(model="m", messages=MESSAGES, max_tokens=GEN, logprobs=True, top_logprobs=2, seed=0)
    if stream:
        chunks = list(client.chat.completions.create(stream=True, **kwargs))
        content = [i for c in chunks if c.choices and c.choices[0].logprobs for i in c.choices[0].logprobs.content]
        ids = next(c.choices[0].dllm["token_ids"] for c in chunks if c.choices and c.choices[0].finish_reason)
    else:
        out = client.chat.completions.create(**kwargs)
        content, ids = out.choices[0].logprobs.content, out.choices[0].dllm["token_ids"]
    prompt_ids = model.encode(MESSAGES, chat=True)
    check_tokens(model, ids, [item.logprob for item in content], prompt_ids)
    _, logprobs = oracle(model, prompt_ids)
    for position, item in enumerate(content):
        want = expected_top(model, logprobs[position], 2)
        assert [t.token for t in item.top_logprobs] == [text for text, _ in want]
        assert [t.logprob for t in item.top_logprobs] == pytest.approx([v for _, v in want], abs=TOL)


def test_chat_logprob_bytes_are_each_tokens_utf8():
    """chat's ``bytes``: the UTF-8 bytes of the token's text (OpenAI's; a client joins them to
    rebuild characters a token splits), for the token and each alternative."""
    from dllm.engine.logprobs import TokenLogprob
    from dllm.serve.logprob_format import chat_logprobs

    texts = {1: "é", 2: " 日本", 3: "a"}
    out = chat_logprobs([TokenLogprob(-0.1, [(1, -0.1), (2, -2.5), (3, -4.0)])], [1], 0, lambda ids: texts[ids[0]])
    (item,) = out["content"]
    assert item["bytes"] == [0xC3, 0xA9]
    assert [t["bytes"] for t in item["top_logprobs"]] == [[0xC3, 0xA9], [32, 230, 151, 165, 230, 156, 172], [97]]
