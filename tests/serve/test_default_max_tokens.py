"""A request without max_tokens: the server's default, or what the context leaves when that is
less (as vLLM defaults to the rest of the context). A long prompt that fits used to be a 400
blaming "max_tokens 128", a field the client never sent."""
from __future__ import annotations

import httpx
import pytest

import dllm
from dllm.serve.app import create_app
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import RequestError, ServerDefaults, parse_request
from dllm.serve.scheduler import BatchScheduler
from serve_helpers import running_server

CONTEXT = 512  # the bundled model's max_sequence_length


@pytest.fixture(scope="module")
def model():
    return dllm.load()


def parse(model, body, chat=False, defaults=None):
    return parse_request(body, model, defaults or ServerDefaults(), chat=chat, served_name="m")


def test_the_default_shrinks_to_the_whole_blocks_the_context_leaves(model):
    ids = list(range(5, 5 + 420))  # 92 positions left: two blocks of 32
    parsed = parse(model, {"prompt": ids})
    assert parsed.max_tokens == 64 and parsed.config.gen_length == 64
    assert len(ids) + parsed.config.gen_length <= CONTEXT
    assert parse(model, {"prompt": ids[:100]}).max_tokens == 128  # room enough: the server's default
    longest = parse(model, {"prompt": [ids[:10], list(range(5, 5 + 460))]})  # the longest prompt decides
    assert longest.max_tokens == 32
    chat = parse(model, {"messages": [{"role": "user", "content": "a " * 400}]}, chat=True)
    assert chat.config.gen_length == chat.max_tokens and len(chat.prompt_ids[0]) + chat.max_tokens <= CONTEXT


def test_a_given_max_tokens_is_never_shrunk(model):
    with pytest.raises(RequestError, match="max_tokens 128") as err:
        parse(model, {"prompt": list(range(5, 425)), "max_tokens": 128})
    assert err.value.param == "prompt"
    with pytest.raises(RequestError, match="max_completion_tokens 100"):
        parse(model, {"messages": [{"role": "user", "content": "a " * 400}], "max_completion_tokens": 100},
              chat=True)


def test_no_whole_block_left_names_the_prompt_not_max_tokens(model):
    with pytest.raises(RequestError) as err:
        parse(model, {"prompt": list(range(5, 5 + 500))})  # 12 positions: no block of 32
    assert err.value.param == "prompt" and "max_tokens" not in str(err.value)
    assert "500 tokens" in str(err.value) and "block of 32" in str(err.value)


def test_server_answers_a_long_prompt_without_max_tokens(model):
    scheduler = BatchScheduler(model, SchedulerLimits(max_batch=2, max_queue=4))
    app = create_app(model, scheduler, defaults=ServerDefaults(max_tokens=128), served_name="m")
    try:
        with running_server(app) as url:
            r = httpx.post(url + "/v1/completions", json={"prompt": list(range(5, 5 + 450)), "seed": 1}, timeout=120)
            assert r.status_code == 200, r.text
            choice = r.json()["choices"][0]
            assert len(choice["dllm"]["token_ids"]) <= 32 and choice["finish_reason"] in ("stop", "length")
    finally:
        scheduler.close()
