"""response_format on /v1/completions and /v1/chat/completions: json_schema (strict or not) and
json_object answers are instances of their schema (jsonschema decides) on a random tiny model
whose free answers are not JSON, with rows of different formats and lengths sharing batches;
malformed formats and formats that cannot be honoured are 400s naming response_format."""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

import dllm
from dllm.samplers.constraints import json_answer_errors
from dllm.serve.app import create_app
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import RequestError, ServerDefaults, parse_request
from dllm.serve.scheduler import BatchScheduler
from serve_helpers import running_server
from tests.tiny_helper import write_tiny_helper

NAMES = {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 4}
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 5}, "ok": {"type": "boolean"}},
          "required": ["name", "ok"], "additionalProperties": False}


@pytest.fixture(scope="module")
def tiny(tiny_dirs):
    return dllm.load(tiny_dirs["llada"], dtype="float32")


def _format(schema, strict=True):
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": strict}}


def parse(model, body, chat=False):
    prompt = {"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": "hi"}
    return parse_request({**prompt, "max_tokens": 24, **body}, model, ServerDefaults(), chat=chat, served_name="m")


def test_formats_parse_into_a_constraint_or_none(tiny):
    assert parse(tiny, {}).constraint is None
    assert parse(tiny, {"response_format": {"type": "text"}}).constraint is None
    constrained = parse(tiny, {"response_format": _format(NAMES)}, chat=True).constraint
    assert constrained is not None and constrained.limit == 24
    assert parse(tiny, {"response_format": {"type": "json_object"}}).constraint is not None


def test_a_request_without_max_tokens_decodes_a_bounded_languages_longest_word(tiny):
    """As generate: a choice with no max_tokens gets its longest word and end-of-text (here
    "maybe not", one character a token at most, + 1) as its max_tokens instead of the server's default
    (the canvas stays the server's block, which rows of every length share); a request
    that sends max_tokens, and an unbounded language, keep theirs."""
    def asked(body):
        return parse_request({"prompt": "hi", **body}, tiny, ServerDefaults(), chat=False, served_name="m")

    choice = {"structured_outputs": {"choice": ["yes", "no", "maybe not"]}}
    bounded = asked(choice)
    assert bounded.max_tokens == bounded.constraint.limit == len("maybe not") + 1  # one server block, cut there
    assert asked({**choice, "max_tokens": 24}).max_tokens == 24
    assert asked({"guided_regex": "[a-z]+"}).max_tokens == asked({}).max_tokens
    api = tiny.generate("hi", chat=False, choice=["yes", "no", "maybe not"])
    assert api.stats[0]["nfe"] <= len("maybe not") + 1


@pytest.mark.parametrize("value, words", [
    ({"type": "xml"}, "not one of"),
    ({"type": "json_schema"}, "not one of"),
    ({"type": "json_schema", "json_schema": {"schema": NAMES}}, '"name": str'),
    (_format(NAMES, strict="yes"), "strict must be true or false"),
    (_format({"type": 7}), "not a valid JSON Schema"),
    ("json", "must be an object"),
])
def test_malformed_formats_are_400s_naming_the_field(tiny, value, words):
    with pytest.raises(RequestError, match=words) as err:
        parse(tiny, {"response_format": value})
    assert err.value.param == "response_format" and err.value.status == 400


def test_formats_that_cannot_be_honoured_are_refused(tiny):
    with pytest.raises(RequestError, match="drop the stops"):
        parse(tiny, {"response_format": _format(NAMES), "stop": ["]"]})
    with pytest.raises(RequestError, match="raise max_tokens"):
        parse(tiny, {"response_format": _format({"type": "string", "minLength": 400}), "max_tokens": 8})


def test_a_helper_strategy_composes_with_a_format(tiny_dirs, tmp_path):
    """Every strategy composes; apd needs the helper the server loaded (without one it is a 400)."""
    helped = dllm.load(tiny_dirs["llada"], dtype="float32",
                       helper=write_tiny_helper(tmp_path / "helper", tiny_dirs["llada"]))
    body = {"prompt": "hi", "max_tokens": 16, "response_format": _format(NAMES)}
    assert parse_request(body, helped, ServerDefaults(options={"strategy": "apd"}), chat=False,
                         served_name="m").constraint is not None


def test_constrained_and_free_rows_share_the_server(tiny):
    free = [parse(tiny, {}) for _ in range(1)]
    assert free[0].constraint is None
    scheduler = BatchScheduler(tiny, SchedulerLimits(max_batch=4, max_queue=16))
    app = create_app(tiny, scheduler, defaults=ServerDefaults(options={"block_length": 8}, max_tokens=8),
                     served_name="m")
    try:
        with running_server(app) as url:
            client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)
            calls = [
                lambda: client.completions.create(model="m", prompt="the line", max_tokens=40, seed=1, n=2,
                                                  temperature=0.8, extra_body={"response_format": _format(NAMES)}),
                lambda: client.chat.completions.create(model="m", messages=[{"role": "user", "content": "who?"}],
                                                       max_tokens=24, seed=2, response_format=_format(PERSON, False)),
                lambda: client.completions.create(model="m", prompt="anything", max_tokens=16, seed=3,
                                                  extra_body={"response_format": {"type": "json_object"}}),
                lambda: client.completions.create(model="m", prompt="free text", max_tokens=32, seed=4),
            ]
            with ThreadPoolExecutor(len(calls)) as pool:
                names, person, anything, text = [f.result() for f in [pool.submit(c) for c in calls]]
    finally:
        scheduler.close()
    for choice in names.choices:
        assert json_answer_errors(choice.text, NAMES) is None, choice.text
    assert json_answer_errors(person.choices[0].message.content, PERSON) is None, person.choices[0].message.content
    assert isinstance(json.loads(anything.choices[0].text), dict), anything.choices[0].text
    assert json_answer_errors(text.choices[0].text, NAMES) is not None  # a random model's free text is no JSON
