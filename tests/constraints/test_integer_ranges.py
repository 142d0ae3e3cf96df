"""Integer bounds in a JSON schema (pydantic's ge / gt / le / lt) are enforced, not ignored: the
range regex accepts exactly the canonical integers in the range (checked against every integer
in a window and Python's own comparison), answers of a tiny random model validate against the
schema (jsonschema decides), and bounds the regex cannot write stay refused by name."""
from __future__ import annotations

import json
import random
import re

import jsonschema
import pytest

from dllm.samplers.constraints import ConstraintSpec
from dllm.samplers.constraints.integer_ranges import integer_range_regex

WINDOW = range(-1500, 1501)


def _cases() -> list[tuple[int | None, int | None]]:
    rng = random.Random(0)
    cases = [(0, None), (None, 0), (-5, 5), (1, 120), (0, 0), (-1, -1), (None, -7), (13, None), (-300, None),
             (None, 250), (10, 99), (99, 1000), (-1000, -100), (None, None)]
    cases += [(rng.randint(-1200, 1200), None) for _ in range(10)] + [(None, rng.randint(-1200, 1200)) for _ in range(10)]
    cases += [tuple(sorted((rng.randint(-1200, 1200), rng.randint(-1200, 1200)))) for _ in range(30)]
    return cases


@pytest.mark.parametrize("low, high", _cases())
def test_the_range_regex_is_exactly_the_range(low, high):
    pattern = re.compile(integer_range_regex(low, high))
    got = [n for n in WINDOW if pattern.fullmatch(str(n))]
    assert got == [n for n in WINDOW if (low is None or n >= low) and (high is None or n <= high)]
    assert not any(pattern.fullmatch(s) for s in ("-0", "00", "01", "-01", "", "-", "1.0", "+1"))
    assert bool(pattern.fullmatch("123456789012")) == (high is None)
    assert bool(pattern.fullmatch("-123456789012")) == (low is None)


def test_a_pydantic_models_bounds_hold_in_answers(tiny_models):
    schema = {"type": "object", "required": ["age", "delta", "level"], "additionalProperties": False,
              "properties": {"age": {"type": "integer", "minimum": 18, "maximum": 65},   # Field(ge=18, le=65)
                             "delta": {"type": "integer", "exclusiveMinimum": -3, "exclusiveMaximum": 3},
                             "level": {"type": "integer", "minimum": 1000}}}
    lm = tiny_models["llada"]
    for options in (dict(), dict(temperature=1.0, seed=3)):
        out = lm.generate(["hi", "a longer prompt"], chat=False, max_tokens=48, json_schema=schema, **options)
        for text in out.texts:
            jsonschema.validate(json.loads(text), schema)


def test_bounds_under_refs_and_unused_defs():
    schema = {"type": "array", "items": {"$ref": "#/$defs/small"}, "maxItems": 3,
              "$defs": {"small": {"type": "integer", "minimum": -2, "maximum": 2},
                        "unused": {"type": "integer", "minimum": 7}}}
    pattern = re.compile(ConstraintSpec.parse(json_schema=schema).to_regex())
    assert pattern.fullmatch("[-2,0,2]") and not pattern.fullmatch("[3]") and not pattern.fullmatch("[-3]")


@pytest.mark.parametrize("schema, words", [
    ({"type": "number", "minimum": 0, "enum": [1, 2]}, "'minimum' at /"),
    ({"type": "integer", "minimum": 0, "multipleOf": 2}, "'minimum' at /"),
    ({"type": "integer", "minimum": 5, "maximum": 4}, "leave no integer (5 > 4)"),
    ({"type": "integer", "exclusiveMinimum": 1, "exclusiveMaximum": 2}, "leave no integer (2 > 1)"),
])
def test_bounds_it_cannot_write_are_refused(schema, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        ConstraintSpec.parse(json_schema=schema)
