"""tool_choice "auto" in the forms other models write calls in (``--tool-call-parser`` /
``tool_call_parser=``, as vLLM's): each parser reads answers of 0, 1 and 2 calls to the calls
written here by hand, leaves malformed ones as content, streams content before the calls as it
comes, and a named parser is served on a template that does not show tools in Hermes' form (the
default still refuses it) while an unknown name is refused at startup, listing the known ones."""
from __future__ import annotations

import json
from itertools import combinations

import openai
import pytest

import dllm
from dllm.api.tool_parsers import NAMES
from dllm.api.tools import ToolError, parse_tool_choice
from dllm.cli.main import build_parser
from dllm.serve.cli import server_defaults
from dllm.serve.requests import RequestError, ServerDefaults
from dllm.serve.responses import ResponseWriter
from dllm.serve.tool_stream import ToolStream
from serve_helpers import served_model
from test_tool_calls import ASK, FORECAST, WEATHER, _joined, parse, tiny  # noqa: F401  (tiny: a fixture)

PARIS, TWO = ("weather", {"city": "Paris"}), ("forecast", {"days": 2})
G = '<|"|>'  # Gemma 4's string mark

# parser -> [(answer, content, calls)]: no call, one, two, then malformed answers (all content)
CASES = {
    "hermes": [
        ("Sunny in Paris.", "Sunny in Paris.", []),
        ('<tool_call>{"name": "weather", "arguments": {"city": "Paris"}}</tool_call>', None, [PARIS]),
        ('Looking.\n<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
         '<tool_call>{"name": "forecast", "arguments": {"days": 2}}</tool_call>', "Looking.\n", [PARIS, TWO]),
        ('<tool_call>{"name": "weather", "arguments": {"city": "Par', None, []),
    ],
    "llama3_json": [
        ("It is sunny.", "It is sunny.", []),
        ('{"name": "weather", "parameters": {"city": "Paris"}}', None, [PARIS]),
        ('<|python_tag|>{"name": "weather", "parameters": {"city": "Paris"}}; '
         '{"name": "forecast", "arguments": {"days": 2}}', None, [PARIS, TWO]),
        ('{"name": "weather", "parameters": {"city": "Paris"}} and then some', None, []),
        ('Sure: {"name": "weather", "parameters": {"city": "Paris"}}', None, []),  # calls only from the start
        ('{"name": "weather"}', None, []),  # no parameters
    ],
    "mistral": [
        ("Sunny.", "Sunny.", []),
        ('[TOOL_CALLS][{"name": "weather", "arguments": {"city": "Paris"}}]', None, [PARIS]),
        ('Let me check. [TOOL_CALLS][{"name": "weather", "arguments": {"city": "Paris"}}, '
         '{"name": "forecast", "arguments": {"days": 2}}]', "Let me check. ", [PARIS, TWO]),
        ('[TOOL_CALLS]weather[ARGS]{"city": "Paris"}[TOOL_CALLS]forecast[ARGS]{"days": 2}', None, [PARIS, TWO]),
        ('[TOOL_CALLS][{"name": "weather", "arguments": {"city": "Paris"}', None, []),
        ('[TOOL_CALLS]weather{"city": "Paris"}', None, []),  # no [ARGS]
    ],
    "pythonic": [
        ("Paris is sunny.", "Paris is sunny.", []),
        ('[weather(city="Paris")]', None, [PARIS]),
        ("  [weather(city='Paris'), forecast(days=2)]", None, [PARIS, TWO]),
        ('[weather(city="Paris"), forecast(days=2', None, []),
        ('[weather("Paris")]', None, []),  # positional: no argument name
        ("[weather(city=open('x'))]", None, []),  # not a literal: never evaluated
        ("[1, 2]", None, []),
    ],
    "gemma4": [
        ("Sunny.", "Sunny.", []),
        (f"<|tool_call>call:weather{{city:{G}Paris{G}}}<tool_call|>", None, [PARIS]),
        (f"On it.<|tool_call>call:weather{{city:{G}Paris{G}}}<tool_call|>"
         "<|tool_call>call:forecast{days:2}<tool_call|>", "On it.", [PARIS, TWO]),
        (f"<|tool_call>call:weather{{city:{G}Paris}}<tool_call|>", None, []),  # string never closed
        ("<|tool_call>call:forecast{days:2}", None, []),  # block never closed
        ("<|tool_call>weather{days:2}<tool_call|>", None, []),  # no call:
    ],
}
# a malformed answer is content, whole: the expected content None above stands for the text itself
READS = [(name, text, text if content is None and not calls else content, calls)
         for name, cases in CASES.items() for text, content, calls in cases]


def auto(parser, parallel=None):
    return parse_tool_choice([WEATHER, FORECAST], "auto", parallel, parser)


def test_every_parser_has_cases():
    assert sorted(CASES) == sorted(NAMES)


@pytest.mark.parametrize("parser,text,content,calls", READS)
def test_each_parser_reads_its_calls_and_leaves_the_rest_content(parser, text, content, calls):
    got_content, got_calls = auto(parser).read(text)
    assert got_content == content
    assert [(c.name, json.loads(c.arguments)) for c in got_calls] == calls


@pytest.mark.parametrize("parser,text", [
    ("mistral", '[TOOL_CALLS][{"name": "unknown", "arguments": {}}]'),  # not one of the tools
    ("pythonic", "[weather(city={1, 2})]"),  # a set: JSON has no form for it
    ("pythonic", "[weather(city=1e999)]"),  # inf: not JSON
    ("gemma4", "<|tool_call>call:weather{city:NaN}<tool_call|>"),
    ("llama3_json", '{"name": "weather", "parameters": [1]}'),  # arguments not an object
    ("gemma4", "<|tool_call>call:weather{" + "a:{" * 5000 + "<tool_call|>"),  # too deep: content, no crash
])
def test_calls_of_other_tools_or_not_json_arguments_are_content(parser, text):
    assert auto(parser).read(text) == (text, [])


def test_gemma4_values_read_as_json_values():
    text = (f"<|tool_call>call:weather{{city:{G}Paris, \"FR\"{G},n:-1.5,ok:true,none:null,"
            f"tags:[{G}a{G}, 2],at:{{lat:48.8}}}}<tool_call|>")
    (call,) = auto("gemma4").read(text)[1]
    assert json.loads(call.arguments) == {"city": 'Paris, "FR"', "n": -1.5, "ok": True, "none": None,
                                          "tags": ["a", 2], "at": {"lat": 48.8}}


@pytest.mark.parametrize("parser", NAMES)
def test_parallel_tool_calls_false_keeps_the_first_call(parser):
    text, _, calls = CASES[parser][2]
    assert [(c.name, json.loads(c.arguments)) for c in auto(parser, False).read(text)[1]] == calls[:1]


@pytest.mark.parametrize("parser,text", [(p, text) for p, cases in CASES.items() for text, _, _ in cases])
def test_streamed_deltas_join_to_the_whole_message_at_every_split(parser, text):
    choice = auto(parser)
    whole = ResponseWriter(True, "m", "x", 0, tools=choice)._message(text, {"finish_reason": "stop"})
    expected = (whole["content"], [(c["function"]["name"], c["function"]["arguments"])
                                   for c in whole.get("tool_calls", [])])
    for cut1, cut2 in combinations(range(0, len(text) + 1, 3), 2):
        stream = ToolStream(choice)
        deltas = stream.feed(text[:cut1]) + stream.feed(text[cut1:cut2]) + stream.feed(text[cut2:]) + stream.finish()
        assert _joined(deltas) == expected, (cut1, cut2)
        assert all(deltas)


@pytest.mark.parametrize("parser,head,tail", [
    ("mistral", "Let me check. [TOOL", '_CALLS][{"name": "weather", "arguments": {"city": "Paris"}}]'),
    ("gemma4", "On it.<|tool", f"_call>call:weather{{city:{G}Paris{G}}}<tool_call|>"),
    ("hermes", "Looking.\n<tool", '_call>{"name": "weather", "arguments": {"city": "Paris"}}</tool_call>'),
])
def test_content_before_the_calls_streams_as_it_comes(parser, head, tail):
    """The content goes out before the decode ends; a tail that could begin the calls waits."""
    stream = ToolStream(auto(parser))
    content = head[:head.rindex(" [") + 1] if parser == "mistral" else head[:head.index("<")]
    assert stream.feed(head) == [{"content": content}]
    assert stream.feed(tail) == []
    (calls,) = stream.finish()
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls["tool_calls"]] == [PARIS]


@pytest.mark.parametrize("parser,text", [("llama3_json", '{"name": "weather"'), ("pythonic", "[weather(")])
def test_an_answer_that_may_be_only_calls_is_held_until_it_ends(parser, text):
    stream = ToolStream(auto(parser))
    assert stream.feed(text) == []
    assert stream.finish() == [{"content": text}]  # never whole calls: all of it content
    other = ToolStream(auto(parser))
    assert other.feed("Sunny") == [{"content": "Sunny"}]  # not calls from its start: content at once


# ---- the option: named, refused when unknown, and served ----

def test_an_unknown_parser_is_refused_listing_the_known_ones(tiny, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--tool-call-parser", "hermes2"])
    known = "dllm reads hermes, llama3_json, mistral, pythonic, gemma4"
    assert f"unknown parser 'hermes2'; {known}" in capsys.readouterr().err
    with pytest.raises(ToolError, match=known) as err:
        parse_tool_choice([WEATHER], "auto", parser="hermes2")
    assert err.value.field == "tool_call_parser"
    with pytest.raises(ValueError, match="unknown tool call parser 'xml'"):
        tiny.generate(ASK, tools=[WEATHER], tool_call_parser="xml", max_tokens=8)


def test_the_option_reaches_the_servers_defaults():
    assert server_defaults(build_parser().parse_args(["serve", "--tool-call-parser", "mistral"])).tool_call_parser \
        == "mistral"
    assert server_defaults(build_parser().parse_args(["serve"])).tool_call_parser is None


# a Mistral-form template of this test's own: tools listed before the last user turn's [INST]
MISTRAL_TEMPLATE = ("{% for m in messages %}{% if m.role == 'user' %}{% if tools and loop.last %}[AVAILABLE_TOOLS]"
                    "{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}[INST]{{ m.content }}[/INST]"
                    "{% else %}{{ m.content }}{% endif %}{% endfor %}")


@pytest.fixture(scope="module")
def mistral(tiny_dirs):
    """The tiny model loaded with a Mistral-form template, as --chat-template gives it."""
    return dllm.load(tiny_dirs["llada"], dtype="float32", chat_template=MISTRAL_TEMPLATE)


def test_a_named_parser_serves_auto_where_the_default_refuses_it(tiny, mistral):
    for model in (tiny, mistral):  # a template that ignores tools, one that shows them in another form
        with pytest.raises(RequestError, match="--tool-call-parser") as err:
            parse(model, tools=[WEATHER], tool_choice="auto")
        assert err.value.param == "tool_choice"
    named = ServerDefaults(tool_call_parser="mistral")
    from dllm.serve.requests import parse_request
    for model in (tiny, mistral):  # named: trusted, as vLLM
        parsed = parse_request({"messages": ASK, "max_tokens": 16, "tools": [WEATHER]}, model, named, chat=True,
                               served_name="m")
        assert parsed.tools.mode == "auto" and parsed.tools.parser == "mistral" and parsed.constraint is None
    assert "[AVAILABLE_TOOLS]" in mistral.tokenizer.decode(parsed.prompt_ids[0])


def test_generate_and_stream_read_calls_in_the_named_form(tiny, monkeypatch):
    """generate / stream with tool_call_parser read a pythonic answer as its calls (the tiny model's
    answers' text made one, as the server test below does), on a template that ignores tools."""
    answer = '[weather(city="Paris"), forecast(days=2)]'
    real = tiny.tokenizer.decode
    monkeypatch.setattr(tiny.tokenizer, "decode", lambda ids, **k: answer if 0 < len(ids) <= 16 else real(ids, **k))
    out = tiny.generate([ASK, ASK[:1] * 2], tools=[WEATHER, FORECAST], tool_call_parser="pythonic", seeds=[1, 2],
                        max_tokens=16)
    assert [[(c.name, json.loads(c.arguments)) for c in calls] for calls in out.tool_calls] == [[PARIS, TWO]] * 2
    last = list(tiny.stream(ASK, tools=[WEATHER, FORECAST], tool_call_parser="pythonic", seed=1, max_tokens=16))[-1]
    assert [(c.name, json.loads(c.arguments)) for c in last.tool_calls] == [PARIS, TWO]


def test_served_answers_in_the_named_form_are_calls_whole_and_streamed(mistral, monkeypatch):
    """The server with --tool-call-parser mistral reads a Mistral answer as calls. The tiny model
    never writes one, so its answers' text is made one (the prompt, longer than 16 tokens, stays)."""
    answer = 'Checking. [TOOL_CALLS][{"name": "weather", "arguments": {"city": "Paris"}}]'
    real = mistral.tokenizer.decode
    monkeypatch.setattr(mistral.tokenizer, "decode",
                        lambda ids, **k: answer if 0 < len(ids) <= 16 else real(ids, **k))
    with served_model(mistral, ServerDefaults(tool_call_parser="mistral")) as (_, url):
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        asked = dict(model="m", messages=ASK, tools=[WEATHER, FORECAST], max_tokens=16, seed=1)
        choice = client.chat.completions.create(**asked).choices[0]
        assert choice.message.content == "Checking. "
        assert [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls] == [PARIS]
        chunks = list(client.chat.completions.create(stream=True, **asked))
    deltas = [c.choices[0].delta.model_dump(exclude_none=True) for c in chunks if c.choices]
    content, calls = _joined(deltas)
    assert content == "Checking. " and [(n, json.loads(a)) for n, a in calls] == [PARIS]
    # "tool_calls" when the answer stopped, "length" when it ran out of tokens: the same both ways
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == \
        [choice.finish_reason] and choice.finish_reason in ("tool_calls", "length")


class _Vocabulary:
    """A tokenizer whose special tokens are one id each and every other character one id."""

    def __init__(self, special: set[str]):
        self.special = special

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [0] if text in self.special else [ord(c) for c in text]


@pytest.mark.parametrize("name, special, split", [
    ("hermes", {"<tool_call>", "</tool_call>"}, []),
    ("hermes", set(), ["<tool_call>"]),
    ("llama3_json", set(), ["<|python_tag|>"]),  # "{" is one character: never reported
    ("mistral", {"[TOOL_CALLS]"}, []),
    ("pythonic", set(), []),
])
def test_markers_not_in_the_vocabulary_are_the_split_ones(name, special, split):
    from dllm.api.tool_parsers import split_markers, tool_parser

    assert split_markers(tool_parser(name), _Vocabulary(special)) == split


def test_serve_warns_when_the_named_parsers_markers_are_split(tiny, caplog):
    """--tool-call-parser hermes on a model whose vocabulary writes <tool_call> in several tokens
    (the tiny checkpoint's): one warning at start-up naming the marker; no parser named, none."""
    from dllm.serve.cli import warn_split_markers

    assert len(tiny.tokenizer.encode("<tool_call>", add_special_tokens=False)) > 1
    with caplog.at_level("WARNING"):
        warn_split_markers(tiny, None)
        assert not caplog.records
        warn_split_markers(tiny, "hermes")
    assert len(caplog.records) == 1 and "<tool_call> is not one token" in caplog.records[0].getMessage()
