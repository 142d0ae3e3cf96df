"""response_format {"type": "grammar", "grammar": "<Lark EBNF>"}: answers over HTTP parse under the
grammar (Lark decides), sharing the server with a free row; a malformed format
or a grammar that does not parse is a 400 naming response_format before any model work."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

import dllm
from dllm.serve.app import create_app
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import RequestError, ServerDefaults, parse_request
from dllm.serve.scheduler import BatchScheduler
from serve_helpers import running_server

lark = pytest.importorskip("lark")

NESTED = 'start: "(" [start ("," start)*] ")"\n'


@pytest.fixture(scope="module")
def tiny(tiny_dirs):
    return dllm.load(tiny_dirs["llada"], dtype="float32")


def _parse(model, value):
    return parse_request({"prompt": "hi", "max_tokens": 12, "response_format": value}, model, ServerDefaults(),
                         chat=False, served_name="m")


@pytest.mark.parametrize("value, words", [
    ({"type": "grammar"}, '"grammar": "<Lark EBNF>"'),
    ({"type": "grammar", "grammar": 7}, '"grammar": "<Lark EBNF>"'),
    ({"type": "grammar", "grammar": "start: ("}, "does not parse as Lark EBNF"),
    ({"type": "grammar", "grammar": 'start: "(" ~ 20'}, "raise max_tokens"),
])
def test_bad_grammar_formats_are_400s_naming_the_field(tiny, monkeypatch, value, words):
    monkeypatch.setattr(tiny.model, "forward", lambda *a, **k: pytest.fail("a forward ran"))
    with pytest.raises(RequestError, match=words) as err:
        _parse(tiny, value)
    assert err.value.param == "response_format" and err.value.status == 400


def test_grammar_rows_share_the_server_with_free_rows(tiny):
    constraint = _parse(tiny, {"type": "grammar", "grammar": NESTED}).constraint
    assert constraint.limit == 12
    scheduler = BatchScheduler(tiny, SchedulerLimits(max_batch=4, max_queue=16))
    app = create_app(tiny, scheduler, defaults=ServerDefaults(options={"block_length": 4}, max_tokens=8),
                     served_name="m")
    fmt = {"response_format": {"type": "grammar", "grammar": NESTED}}
    try:
        with running_server(app) as url:
            client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)
            calls = [lambda: client.completions.create(model="m", prompt="the line", max_tokens=12, seed=1, n=2,
                                                       temperature=0.8, extra_body=fmt),
                     lambda: client.completions.create(model="m", prompt="free text", max_tokens=8, seed=4)]
            with ThreadPoolExecutor(len(calls)) as pool:
                nested, free = [f.result() for f in [pool.submit(c) for c in calls]]
    finally:
        scheduler.close()
    parser = lark.Lark(NESTED, parser="earley", lexer="dynamic_complete")
    for choice in nested.choices:
        parser.parse(choice.text)  # raises when the answer is not a sentence
    assert not free.choices[0].text.startswith("(")
