"""Each integer bound keyword is read as JSON Schema reads it: a fractional bound rounds inwards
(minimum 1.5 allows 2, not 1), several bounds together keep the tightest, and an empty range is
refused rather than written as a regex that matches the empty answer. jsonschema decides every
integer in a window."""
from __future__ import annotations

import re

import jsonschema
import pytest

from dllm.samplers.constraints import ConstraintSpec
from dllm.samplers.constraints.integer_ranges import integer_range_regex

WINDOW = range(-30, 31)


@pytest.mark.parametrize("bounds", [
    {"minimum": 1.5, "maximum": 4.5},
    {"minimum": -2.5, "maximum": -0.5},
    {"exclusiveMinimum": -3.5, "exclusiveMaximum": 2.5},
    {"minimum": 0, "exclusiveMinimum": 3, "maximum": 10, "exclusiveMaximum": 8},   # exclusive ones tighter
    {"minimum": 5, "exclusiveMinimum": 1, "maximum": 7, "exclusiveMaximum": 20},   # inclusive ones tighter
    {"minimum": -7, "exclusiveMinimum": -7},
])
def test_the_regex_allows_exactly_the_integers_jsonschema_allows(bounds):
    schema = {"type": "integer", **bounds}
    pattern = re.compile(ConstraintSpec.parse(json_schema=schema).to_regex())
    allowed = [n for n in WINDOW if jsonschema.Draft202012Validator(schema).is_valid(n)]
    assert [n for n in WINDOW if pattern.fullmatch(str(n))] == allowed


@pytest.mark.parametrize("low", [-10, 0, 5, 100])
def test_an_empty_range_is_refused_not_written(low):
    with pytest.raises(ValueError, match=re.escape(f"no integer lies in [{low}, {low - 1}]")):
        integer_range_regex(low, low - 1)


@pytest.mark.parametrize("defs", ["$defs", "definitions"])
def test_a_ref_into_a_bounded_integers_own_defs_still_resolves(defs):
    schema = {"type": "object", "required": ["a", "b"], "additionalProperties": False, "properties": {
        "a": {"$ref": f"#/properties/b/{defs}/flag"},
        "b": {"type": "integer", "minimum": 0, "maximum": 3, defs: {"flag": {"type": "boolean"}}}}}
    pattern = re.compile(ConstraintSpec.parse(json_schema=schema).to_regex())
    assert pattern.fullmatch('{"a":true,"b":3}') and not pattern.fullmatch('{"a":true,"b":4}')
