"""The shape check's model of outlines-core (``DISPATCH``: the keyword a subschema is written from,
first present wins) is outlines-core's own order: for every two of those keywords in one schema,
the library's regex writes the earlier's answer and not the later's. The refusals name what is
dropped from that order, so a wrong order would name the wrong keywords and the wrong fix."""
from __future__ import annotations

import itertools
import json
import re

import pytest

from dllm.samplers.constraints.schema_shapes import DISPATCH

# each keyword alone, and the one answer it writes
ALONE = {
    "properties": ({"properties": {"p": {"const": 1}}, "required": ["p"]}, '{"p":1}'),
    "allOf": ({"allOf": [{"const": 2}]}, "2"),
    "anyOf": ({"anyOf": [{"const": 3}]}, "3"),
    "prefixItems": ({"prefixItems": [{"const": 4}]}, "[4]"),
    "enum": ({"enum": [5]}, "5"),
    "const": ({"const": 6}, "6"),
    "$ref": ({"$ref": "#/$defs/seven", "$defs": {"seven": {"const": 7}}}, "7"),
    "type": ({"type": "boolean"}, "true"),
}


def test_every_dispatch_keyword_has_a_case():
    assert sorted(DISPATCH) == sorted(ALONE)


@pytest.mark.parametrize("first, later", list(itertools.combinations(DISPATCH, 2)))
def test_the_library_writes_the_earlier_keyword(first, later):
    from outlines_core.json_schema import build_regex_from_schema

    regex = build_regex_from_schema(json.dumps({**ALONE[first][0], **ALONE[later][0]}))
    assert re.fullmatch(regex, ALONE[first][1]) and not re.fullmatch(regex, ALONE[later][1])
