"""vLLM's structured-output fields on the server (guided_json / guided_regex / guided_choice /
guided_grammar, structured_outputs {json, regex, choice, grammar, json_object}) as aliases of
response_format (anchored regexes included); two constraints, unknown keys and schemas the
constraint cannot enforce are 400s naming the field before any model work, on completions and chat
alike (a GBNF grammar named as such); streamed constrained answers are words and equal
the unstreamed ones."""
from __future__ import annotations

import re
import sys

import openai
import pytest

import dllm
from dllm.samplers.constraints import json_answer_errors
from dllm.serve.app import create_app
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import RequestError, ServerDefaults, parse_request
from dllm.serve.scheduler import BatchScheduler
from serve_helpers import running_server

NAMES = {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 4}


@pytest.fixture(scope="module")
def tiny(tiny_dirs):
    return dllm.load(tiny_dirs["llada"], dtype="float32")


def parse(model, body, chat=False):
    prompt = {"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": "hi"}
    return parse_request({**prompt, "max_tokens": 24, **body}, model, ServerDefaults(), chat=chat, served_name="m")


def _regex(constraint) -> str:
    return constraint.dfa.regex


@pytest.mark.parametrize("body, matches, refuses", [
    ({"guided_json": NAMES}, '["ab"]', "ab"),
    ({"guided_json": '{"type": "boolean"}'}, "true", "1"),
    ({"guided_regex": "[ab]+"}, "abba", "abc"),
    ({"guided_choice": ["yes", "no"]}, "no", "nope"),
    ({"structured_outputs": {"json": NAMES}}, '["ab"]', "ab"),
    ({"structured_outputs": {"regex": "[ab]+"}}, "ab", "c"),
    ({"structured_outputs": {"choice": ["yes", "no"]}}, "yes", "y"),
    ({"structured_outputs": {"json_object": True}}, '{"a": 1}', "[1]"),
    ({"guided_regex": r"^[ab]+$"}, "abba", "abc"),  # anchored, as vLLM users write it
    ({"structured_outputs": {"regex": r"^\d{3}"}}, "123", "1234"),
])
def test_aliases_become_the_rows_constraint(tiny, body, matches, refuses):
    regex = _regex(parse(tiny, body).constraint)
    assert re.fullmatch(regex, matches) and not re.fullmatch(regex, refuses)


def test_grammar_aliases(tiny):
    pytest.importorskip("lark")
    grammar = 'start: "yes" | "no"'
    for body in ({"guided_grammar": grammar}, {"structured_outputs": {"grammar": grammar}}):
        assert parse(tiny, body).constraint is not None
    assert parse(tiny, {"structured_outputs": {"json_object": False}}).constraint is None


@pytest.mark.parametrize("body, param, words", [
    ({"guided_regex": "a+", "guided_choice": ["a"]}, "guided_choice", "guided_regex and guided_choice"),
    ({"response_format": {"type": "json_object"}, "guided_json": NAMES}, "guided_json", "one constraint"),
    ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "structured_outputs", "one constraint"),
    ({"guided_regex": "a+", "structured_outputs": {"json": NAMES}}, "structured_outputs", "keep one"),
    ({"structured_outputs": {"structural_tag": "x"}}, "structured_outputs", "structural_tag is not supported"),
    ({"structured_outputs": ["a"]}, "structured_outputs", "must be an object"),
    ({"guided_json": {"type": "number", "minimum": 5, "multipleOf": 0.5}}, "guided_json", "'minimum' at /"),
    ({"guided_json": {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}}}, "guided_json",
     "'multipleOf' at /properties/n"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"oneOf": [
        {"type": "integer"}, {"type": "number"}]}}}}, "response_format", "use anyOf"),
    ({"structured_outputs": {"json": {"type": "array", "uniqueItems": True}}}, "structured_outputs", "uniqueItems"),
    ({"guided_json": {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                                {"type": "object", "properties": {"b": {"type": "integer"}}, "additionalProperties": False}]}},
     "guided_json", "allOf (or $ref with keywords beside it) at / has no exact merge: one part requires 'a'"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {
        "type": "string", "pattern": "^[a-z]+$", "maxLength": 4}}}}, "response_format", "'pattern' and 'maxLength'"),
    ({"guided_regex": "a(", "max_tokens": 8}, "guided_regex", "cannot be compiled"),
    ({"guided_choice": "yes"}, "guided_choice", "non-empty list"),
    ({"guided_regex": "a+", "stop": ["a"]}, "guided_regex", "drop the stops"),
    ({"guided_grammar": 'root ::= "yes" | "no"'}, "guided_grammar", "'::=' is GBNF / BNF"),
    ({"structured_outputs": {"grammar": "start: ("}}, "structured_outputs", "does not parse as Lark EBNF"),
    ({"structured_outputs": {"regex": "a("}}, "structured_outputs", "cannot be compiled"),
    ({"structured_outputs": {"choice": []}}, "structured_outputs", "non-empty list"),
    ({"guided_json": {"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}}, "$ref": "#/$defs/n"}},
     "guided_json", "$ref (a recursive one written a few levels deep; deeper needs grammar=)"),
])
@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_bad_constraint_fields_are_400s_before_any_model_work(tiny, monkeypatch, body, param, words, chat):
    monkeypatch.setattr(tiny.model, "forward", lambda *a, **k: pytest.fail("a forward ran"))
    with pytest.raises(RequestError, match=re.escape(words)) as err:
        parse(tiny, body, chat)
    assert err.value.param == param and err.value.status == 400


def test_streamed_constrained_answers_are_words_and_equal_unstreamed(tiny):
    scheduler = BatchScheduler(tiny, SchedulerLimits(max_batch=4, max_queue=16))
    app = create_app(tiny, scheduler, defaults=ServerDefaults(options={"block_length": 8}), served_name="m")
    common = dict(model="m", max_tokens=24, seed=5, temperature=0.8)
    try:
        with running_server(app) as url:
            client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)
            body = {"guided_json": NAMES}
            whole = client.completions.create(prompt="the line", extra_body=body, **common).choices[0].text
            chunks = client.completions.create(prompt="the line", stream=True, extra_body=body, **common)
            streamed = "".join(c.choices[0].text for c in chunks if c.choices)
            chat = client.chat.completions.create(messages=[{"role": "user", "content": "who?"}], stream=True,
                                                  extra_body={"structured_outputs": {"choice": ["yes", "no"]}},
                                                  **common)
            said = "".join(c.choices[0].delta.content or "" for c in chat if c.choices)
    finally:
        scheduler.close()
    assert json_answer_errors(whole, NAMES) is None, whole
    assert streamed == whole
    assert said in ("yes", "no"), said


def test_a_server_without_the_structured_extra_says_so(tiny, monkeypatch):
    monkeypatch.setitem(sys.modules, "outlines_core.json_schema", None)  # as if not installed
    with pytest.raises(RequestError, match=r"cannot serve it: .*pip install 'dllm\[structured\]'") as err:
        parse(tiny, {"guided_json": {"type": "object", "properties": {"b": {"type": "boolean"}}}})
    assert err.value.param == "guided_json" and err.value.status == 400
