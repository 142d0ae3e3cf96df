"""OpenAI fields that mean nothing for the answer (issue 37): ``store``, ``metadata``,
``service_tier``, ``user`` and ``stream_options.include_obfuscation`` are accepted and ignored (the
openai SDK's users and frameworks send them; they used to be 400 "unknown field"), as is
``parallel_tool_calls`` without tools; fields that would change the answer and that dllm does not
serve stay refused unless neutral (tools are served: test_tool_calls.py)."""
from __future__ import annotations

import openai
import pytest

import dllm
from dllm.serve.app import create_app
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import IGNORED_FIELDS, RequestError, ServerDefaults, parse_request
from dllm.serve.scheduler import BatchScheduler
from serve_helpers import running_server

# the last three: OpenAI's newer chat fields (safety_identifier replaces user); they were 400 "unknown field"
IGNORED = {"store": True, "metadata": {"team": "a", "run": "7"}, "service_tier": "auto", "user": "u-1",
           "safety_identifier": "h-42", "prompt_cache_key": "team-a", "prompt_cache_retention": "24h",
           "prompt_cache_options": {"mode": "explicit", "ttl": "30m"}}  # the openai SDK's newest: was 400 "unknown"
CHANGES_THE_ANSWER = {"presence_penalty": 0.5, "frequency_penalty": 1.0, "best_of": 2,
                      "logit_bias": {"5": 10}, "reasoning_effort": "high", "modalities": ["text", "audio"],
                      "functions": [{"name": "f"}], "function_call": "auto", "repetition_penalty": 1.1,
                      "min_p": 0.05, "min_tokens": 4, "ignore_eos": True, "skip_special_tokens": False,
                      "include_stop_str_in_output": True, "use_beam_search": True,
                      # the openai SDK's newest chat fields: they were 400 "unknown field" naming dllm's options
                      "verbosity": "low", "moderation": {"model": "omni-moderation-latest"}}
# vLLM's sampling extras at their defaults, as clients written for vLLM send them: they were 400
# "unknown field"
VLLM_DEFAULTS = {"repetition_penalty": 1.0, "min_p": 0.0, "min_tokens": 0, "ignore_eos": False,
                 "skip_special_tokens": True, "spaces_between_special_tokens": True,
                 "include_stop_str_in_output": False, "use_beam_search": False, "length_penalty": 1.0}
MESSAGES = [{"role": "user", "content": "Who waits first?"}]


@pytest.fixture(scope="module")
def model():
    return dllm.load()


def parse(model, body, chat):
    prompt = {"messages": MESSAGES} if chat else {"prompt": "Alice waits"}
    return parse_request({**prompt, "seed": 3, "max_tokens": 8, **body}, model, ServerDefaults(), chat=chat,
                         served_name="m")


def test_the_ignored_set_is_the_documented_one():
    assert IGNORED_FIELDS == set(IGNORED)


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("field", sorted(IGNORED))
def test_ignored_fields_leave_the_request_unchanged(model, chat, field):
    assert parse(model, {field: IGNORED[field]}, chat) == parse(model, {}, chat)


def test_obfuscation_option_is_ignored(model):
    streamed = parse(model, {"stream": True, "stream_options": {"include_usage": True, "include_obfuscation": True}},
                     chat=True)
    assert streamed == parse(model, {"stream": True, "stream_options": {"include_usage": True}}, chat=True)
    with pytest.raises(RequestError, match="include_usage"):
        parse(model, {"stream": True, "stream_options": {"include_usage": True, "chunk_size": 4}}, chat=True)


@pytest.mark.parametrize("field", sorted(CHANGES_THE_ANSWER))
def test_fields_that_change_the_answer_are_refused(model, field):
    with pytest.raises(RequestError, match="would change the answer") as err:
        parse(model, {field: CHANGES_THE_ANSWER[field]}, chat=True)
    assert err.value.param == field and err.value.status == 400


def test_neutral_values_pass(model):
    neutral = {"modalities": ["text"], "tool_choice": "none", "presence_penalty": 0, "best_of": 1, "tools": [],
               "parallel_tool_calls": False, "verbosity": "medium", "moderation": None}
    assert parse(model, neutral, chat=True) == parse(model, {}, chat=True)
    for chat in (False, True):
        assert parse(model, VLLM_DEFAULTS, chat) == parse(model, {}, chat)


def test_openai_client_with_the_ignored_fields_gets_the_same_answer(model):
    scheduler = BatchScheduler(model, SchedulerLimits(max_batch=2, max_queue=4))
    app = create_app(model, scheduler, defaults=ServerDefaults(options={"block_length": 8}, max_tokens=8),
                     served_name="m")
    try:
        with running_server(app) as url:
            client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
            plain = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=8, seed=11)
            extra = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=8, seed=11, store=True,
                                                   metadata={"team": "a"}, service_tier="auto", user="u-1",
                                                   parallel_tool_calls=False, safety_identifier="h-42",
                                                   prompt_cache_key="team-a")
            assert extra.choices[0].message.content == plain.choices[0].message.content
            done = client.completions.create(model="m", prompt="Alice waits", max_tokens=8, seed=11, user="u-1",
                                             extra_body={"store": False, "metadata": {}, "service_tier": "default"})
            assert done.choices[0].finish_reason in ("stop", "length")
            with pytest.raises(openai.BadRequestError, match="presence_penalty"):
                client.completions.create(model="m", prompt="x", max_tokens=8, presence_penalty=1.0)
    finally:
        scheduler.close()


def test_chat_echo_is_refused_naming_what_to_use(model):
    """vLLM's chat ``echo`` prepends a final assistant message that the answer continues; dllm's
    chat always opens a new assistant turn, so there is nothing to echo: the 400 says so and
    names completions' echo; ``echo: false`` (vLLM's default, sent by some clients) passes."""
    with pytest.raises(RequestError) as err:
        parse(model, {"echo": True}, chat=True)
    message = str(err.value)
    assert err.value.param == "echo" and err.value.status == 400
    assert "new assistant turn" in message and "/v1/completions" in message and "unknown field" not in message
    assert parse(model, {"echo": False}, chat=True) == parse(model, {}, chat=True)


@pytest.mark.parametrize("chat", [False, True])
def test_a_request_past_the_context_names_the_field_at_fault(model, chat):
    """An answer longer than the whole context is max_tokens' fault whatever the prompt (it was
    blamed on the prompt); a long prompt with a short answer is the prompt's (chat: messages)."""
    context = model.model.config.max_sequence_length
    length = "max_completion_tokens" if chat else "max_tokens"
    with pytest.raises(RequestError) as err:
        parse(model, {"max_tokens": None, length: context + 8}, chat)
    assert err.value.param == length and f"lower {length}" in str(err.value)
    long = {"messages": [{"role": "user", "content": "wait " * context}]} if chat else {"prompt": "wait " * context}
    with pytest.raises(RequestError) as err:
        parse(model, long, chat)
    source = "messages" if chat else "prompt"
    assert err.value.param == source and f"shorten the {source}" in str(err.value)


def test_an_assistant_refusal_part_reads_as_its_text(model):
    """OpenAI's assistant content may hold refusal parts (a history sent back); vLLM reads them as
    text. They were a 400 "text parts only"; elsewhere they still are."""
    def turn(part):
        return {"messages": [*MESSAGES, {"role": "assistant", "content": [part]}, *MESSAGES]}
    refused = parse(model, turn({"type": "refusal", "refusal": "I cannot say."}), chat=True)
    assert refused == parse(model, turn({"type": "text", "text": "I cannot say."}), chat=True)
    assert refused != parse(model, turn({"type": "text", "text": "I can say."}), chat=True)
    with pytest.raises(RequestError, match="'refusal'"):
        parse(model, {"messages": [{"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}]}, chat=True)


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("typo, meant", [("temprature", "temperature"), ("max_token", "max_tokens"),
                                         ("polcy", "policy")])
def test_a_misspelt_field_is_refused_naming_the_nearest_one(model, chat, typo, meant):
    with pytest.raises(RequestError, match=f"unknown field.*did you mean '{meant}'") as err:
        parse(model, {typo: 1}, chat)
    assert err.value.param == typo


def test_a_field_far_from_every_name_gets_no_guess(model):
    with pytest.raises(RequestError, match="unknown field") as err:
        parse(model, {"zzzqqq": 1}, chat=True)
    assert "did you mean" not in str(err.value)
