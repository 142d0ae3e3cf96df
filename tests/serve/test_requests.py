"""Request parsing: server defaults under request fields, OpenAI fields mapped onto dllm's, and
``dllm serve``'s command line turned into those defaults (bad options refused before loading)."""
from __future__ import annotations

import pytest

import dllm
from dllm.cli import build_parser, main
from dllm.engine.config import sample_seeds
from dllm.serve.cli import server_defaults
from dllm.serve.limits import ServerLimits
from dllm.serve.requests import RequestError, ServerDefaults, check_chars, parse_request


@pytest.fixture(scope="module")
def model():
    return dllm.load()


def parse(model, body, defaults=None, chat=False):
    return parse_request(body, model, defaults or ServerDefaults(), chat=chat, served_name="m")


def test_request_fields_override_server_defaults(model):
    defaults = ServerDefaults(options={"policy": "threshold", "policy_args": {"tau": 0.8}, "block_length": 8},
                              max_tokens=16)
    p = parse(model, {"prompt": "hi"}, defaults)
    assert (p.config.policy, p.config.policy_args, p.config.gen_length, p.max_tokens) == ("threshold", {"tau": 0.8}, 16, 16)
    p = parse(model, {"prompt": "hi", "policy": "low_confidence", "policy_args": {}, "max_tokens": 20}, defaults)
    assert (p.config.policy, p.config.gen_length, p.config.block_length, p.max_tokens) == ("low_confidence", 24, 8, 20)


def test_openai_fields_map_onto_dllm(model):
    p = parse(model, {"prompt": ["a", "b"], "n": 3, "seed": 5, "temperature": 0.5, "top_p": 0.9, "stop": "x",
                      "stream": True, "stream_options": {"include_usage": True}})
    assert p.seeds == sample_seeds(5, 3) and len(p.prompt_ids) == 2
    assert (p.config.temperature, p.config.top_p, p.stops.strings, p.stream, p.include_usage) == (0.5, 0.9, ("x",), True, True)
    chat = parse(model, {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 8}, chat=True)
    assert chat.prompt_ids == [model.encode([{"role": "user", "content": "hi"}], chat=True)] and chat.max_tokens == 8


def test_n_is_one_to_64_samples(model):
    assert parse(model, {"prompt": "hi", "n": 64}).n == 64  # the bound itself is served
    for n in (65, 0, 2.0):
        with pytest.raises(RequestError, match=r"n must be an integer in \[1, 64\]") as err:
            parse(model, {"prompt": "hi", "n": n})
        assert err.value.param == "n"


def test_a_prompt_and_answer_that_fill_the_context_exactly_fit(model):
    context = model.model.config.max_sequence_length
    body = {"prompt": [5] * (context - 32), "max_tokens": 32}  # one block of 32 after the prompt
    assert parse(model, body).max_tokens == 32
    with pytest.raises(RequestError, match=f"= {context + 1} > the model's context of {context}") as err:
        parse(model, {**body, "prompt": [5] * (context - 31)})
    assert err.value.param == "prompt"


def test_a_prompt_of_exactly_the_character_cap_is_tokenized():
    limits = ServerLimits(chars_per_token=2)
    check_chars(["a" * 20], limits, 10, chat=False)  # a context of 10 tokens x 2 characters: at the cap
    with pytest.raises(RequestError, match=r"21 characters, more than .*\(at most 20: 10 tokens x 2"):
        check_chars(["a" * 21], limits, 10, chat=False)


CHAT = [{"role": "user", "content": "hi"}]


def test_logprobs_and_seed_at_their_bounds(model):
    """20 alternatives a token (chat: top_logprobs, 0 when logprobs=true alone; completions:
    logprobs) and seeds in [0, 2**63) are served; one more, or top_logprobs without logprobs, is a
    400 on its field."""
    assert parse(model, {"messages": CHAT, "logprobs": True, "top_logprobs": 20}, chat=True).top_logprobs == 20
    assert parse(model, {"messages": CHAT, "logprobs": True}, chat=True).top_logprobs == 0
    assert parse(model, {"prompt": "hi", "logprobs": 20}).top_logprobs == 20
    assert parse(model, {"prompt": "hi", "seed": 2**63 - 1}).seed == 2**63 - 1
    for body, chat, field in [({"messages": CHAT, "logprobs": True, "top_logprobs": 21}, True, "top_logprobs"),
                              ({"messages": CHAT, "top_logprobs": 3}, True, "top_logprobs"),
                              ({"prompt": "hi", "logprobs": 21}, False, "logprobs"),
                              ({"prompt": "hi", "seed": 2**63}, False, "seed")]:
        with pytest.raises(RequestError) as err:
            parse(model, body, chat=chat)
        assert err.value.param == field, body


def test_a_messages_text_parts_are_joined_by_newlines(model):
    parts = [{"type": "text", "text": "Ann Lee"}, {"type": "text", "text": "Tom Kay"}]
    parsed = parse(model, {"messages": [{"role": "user", "content": parts}]}, chat=True)
    assert parsed.prompt_ids == [model.encode([{"role": "user", "content": "Ann Lee\nTom Kay"}], chat=True)]


def test_a_prompt_of_token_ids_echoes_its_special_tokens(model):
    """echo gives back the prompt as sent: token ids are decoded with their special tokens."""
    eos = model.model.eos_token_ids[0]
    parsed = parse(model, {"prompt": model.encode("hi", chat=False) + [eos], "echo": True})
    assert parsed.prompt_texts == ["hi" + model.tokenizer.convert_ids_to_tokens(eos)]


def test_server_steps_apply_to_its_own_length_only(model):
    defaults = ServerDefaults(options={"steps": 16, "block_length": 8}, max_tokens=32)
    assert parse(model, {"prompt": "hi"}, defaults).config.steps == 16
    assert parse(model, {"prompt": "hi", "max_tokens": 8}, defaults).config.steps == 8  # one token per step


@pytest.mark.parametrize("body, param", [({"prompt": "hi", "echo": True}, "echo"), ({"prompt": "hi"}, "prompt"),
                                         ({"messages": []}, "messages")])
def test_chat_takes_messages_only(model, body, param):
    with pytest.raises(RequestError) as err:
        parse(model, body, chat=True)
    assert err.value.status == 400 and err.value.param == param


def test_serve_command_line_becomes_defaults():
    args = build_parser().parse_args(["serve", "--policy", "threshold", "--policy-arg", "tau=0.7",
                                      "--gen-length", "64", "--block-length", "16", "--temperature", "0.3"])
    defaults = server_defaults(args)
    assert defaults.max_tokens == 64 and "gen_length" not in defaults.options
    assert defaults.options["policy_args"] == {"tau": 0.7} and defaults.options["block_length"] == 16
    assert defaults.options["temperature"] == 0.3 and defaults.options["steps"] is None


def test_serve_refuses_bad_options_before_loading(capsys):
    assert main(["serve", "--model", "/nonexistent/dir", "--policy", "threshold", "--policy-arg", "tau=high"]) == 2
    assert "tau" in capsys.readouterr().err
