"""A tool-call parser reads whole calls or none: one malformed call among good ones leaves the
whole answer content, never a half-read list (here Mistral's per-call form, where a call without
its ``[ARGS]`` is not a call)."""
from __future__ import annotations

from dllm.api.tool_parsers import tool_parser

NAMES = {"weather", "forecast"}


def test_a_mistral_call_without_args_leaves_every_call_content():
    parser = tool_parser("mistral")
    good = '[TOOL_CALLS]weather[ARGS]{"city": "Paris"}'
    assert parser.split(good, NAMES) == (None, [("weather", '{"city": "Paris"}')])
    for text in (good + "[TOOL_CALLS]forecast", "[TOOL_CALLS]forecast" + good):
        assert parser.split(text, NAMES) == (text, [])
