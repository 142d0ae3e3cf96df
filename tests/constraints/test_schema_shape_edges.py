"""Edges of the shape check: an enum beside a $ref is checked against the referenced schema (the
regex writes the listed values, so one the reference refuses would be an answer that breaks the
schema; a $ref that points nowhere is refused), every character JSON escapes counts (control
characters up to U+001F, not only quotes and backslashes), prefixItems' maxItems counts as its
minItems does, and a refusal says how many more problems the schema has."""
from __future__ import annotations

import json
import re

import jsonschema
import pytest

from dllm.samplers.constraints import ConstraintSpec
from test_schema_shapes import invalid_words

INT = {"type": "integer"}
ENUM_BESIDE_REF = {"$defs": {"word": {"type": "string"}}, "enum": ["a", 1], "$ref": "#/$defs/word"}


def test_an_enum_value_the_referenced_schema_refuses_is_refused():
    from outlines_core.json_schema import build_regex_from_schema

    assert re.fullmatch(build_regex_from_schema(json.dumps(ENUM_BESIDE_REF)), "1")  # written as listed
    assert not jsonschema.Draft202012Validator(ENUM_BESIDE_REF).is_valid(1)  # yet not an instance
    with pytest.raises(ValueError, match=r"lists 1 in 'enum' at /, .*'\$ref'"):
        ConstraintSpec.parse(json_schema=ENUM_BESIDE_REF)


@pytest.mark.parametrize("beside, where", [({"$ref": "#/$defs/nope"}, "/"), ({"items": {"$ref": "#/$defs/nope"}}, "/items")])
def test_a_ref_beside_an_enum_that_points_nowhere_is_refused(beside, where):
    with pytest.raises(ValueError, match=re.escape(f"'$ref' '#/$defs/nope' at {where}, but it points to nothing")):
        ConstraintSpec.parse(json_schema={"enum": [["a"]], **beside})


def test_an_enum_the_referenced_schema_allows_passes():
    schema = {"type": "object", "required": ["k"], "additionalProperties": False,
              "properties": {"k": {"enum": ["a", "b"], "$ref": "#/$defs/word"}}, "$defs": {"word": {"type": "string"}}}
    assert invalid_words(schema) == []


@pytest.mark.parametrize("char", ["\n", "\t", "\x00", "\x1f"])
def test_every_control_character_counts_as_escaped(char):
    with pytest.raises(ValueError, match="property name"):
        ConstraintSpec.parse(json_schema={"type": "object", "properties": {f"a{char}b": INT}})
    with pytest.raises(ValueError, match="'pattern' at /"):
        ConstraintSpec.parse(json_schema={"type": "string", "pattern": f"^a{char}b$"})


def test_prefix_items_beyond_max_items_are_refused():
    from outlines_core.json_schema import build_regex_from_schema

    schema = {"type": "array", "prefixItems": [INT, INT], "maxItems": 1}
    assert re.fullmatch(build_regex_from_schema(json.dumps(schema)), "[1,2]")  # two items written
    assert not jsonschema.Draft202012Validator(schema).is_valid([1, 2])  # where one at most is allowed
    with pytest.raises(ValueError, match="'prefixItems' of 2 at /"):
        ConstraintSpec.parse(json_schema=schema)


def test_a_refusal_counts_the_other_problems():
    schema = {"type": "object", "properties": {"a": INT}, "required": ["a", "b", "c"],
              "anyOf": [{"required": ["a"]}]}
    with pytest.raises(ValueError, match=re.escape("(and 2 more)")):  # required b, and a typeless anyOf's a
        ConstraintSpec.parse(json_schema=schema)
