"""Shapes outlines-core's schema -> regex failed on or wrote wrongly, now rewritten to the same
instances (schema_normal.py, schema_merge.py) or refused at parse with their place, the ref or
keyword, and a fix: keywords with no type, type lists beside object keywords, ``false`` at odd
places, refs to nothing, allOf of several objects and keywords beside a $ref, uniqueItems that
asserts nothing. Each case was a regex-step failure with no place, a refusal, or a wrong regex
before."""
from __future__ import annotations

import re

import pytest

from dllm.samplers.constraints import ConstraintSpec
from tests.constraints.test_schema_shapes import invalid_words

INT, STR = {"type": "integer"}, {"type": "string"}


def _regex(schema: dict) -> re.Pattern:
    return re.compile(ConstraintSpec.parse(json_schema=schema).to_regex())


DISJOINT = {"allOf": [{"type": "object", "properties": {"a": INT}, "required": ["a"]},
                      {"type": "object", "properties": {"b": STR}, "required": ["b"]}]}
INHERITED = {"$defs": {"Base": {"type": "object", "properties": {"id": INT}, "required": ["id"]}},
             "allOf": [{"$ref": "#/$defs/Base"}], "properties": {"tag": STR}, "required": ["tag"],
             "description": "a Base with a tag"}  # OpenAPI's inheritance
CLOSED = {"allOf": [{"type": "object", "properties": {"a": INT, "b": INT}, "additionalProperties": False},
                    {"type": "object", "properties": {"b": {"type": "integer", "minimum": 0}, "c": INT}}]}
# schema, words (instances), not words (not instances)
WRITTEN = [
    # no type: the keywords hold for their type, any value of another type is an instance
    ({"maxLength": 2}, ['"ab"', "5", "null", "[1]", '{"k": true}'], ['"abc"']),
    ({"properties": {"a": INT}, "required": ["a"]}, ['{"a": 1}', "1", '"x"', "[]"], ['{"a": "x"}', "{}"]),
    ({"minimum": 1}, ['"x"', "1", "2.5", "false"], ["0", "-3", "0.5"]),
    ({"items": INT}, ["[1, 2]", '"s"', "{}"], ['["s"]']),
    # a type list beside object, array and number keywords
    ({"type": ["object", "null"], "properties": {"a": INT}, "required": ["a"], "additionalProperties": False},
     ['{"a": 1}', "null"], ["{}", "1", '{"a": null}']),
    ({"type": ["object", "null"], "additionalProperties": False}, ["{}", "null"], ['{"a": 1}', "1"]),
    ({"type": ["integer", "null"], "minimum": 2}, ["2", "null", "40"], ["1", "2.5", '"2"']),
    ({"type": ["number"], "maximum": 1}, ["1", "0.5"], ["2"]),
    # false and true at odd places
    ({"type": "array", "items": False}, ["[]"], ["[1]"]),
    ({"type": "object", "properties": {"a": INT, "b": False}, "required": ["a"]}, ['{"a": 1}'], ['{"a": 1, "b": 1}']),
    ({"anyOf": [False, INT, True]}, ["1", '"x"', "null"], []),
    ({"anyOf": [False, INT]}, ["1"], ['"x"']),
    # allOf of objects (inheritance) and keywords beside a $ref
    (DISJOINT, ['{"a": 1, "b": "x"}'], ['{"a": 1}{"b": "x"}', '{"a": 1}', '{"b": "x"}']),
    (INHERITED, ['{"id": 1, "tag": "t"}'], ['{"tag": "t"}', '{"id": 1}']),
    (CLOSED, ['{"a": 1, "b": 2}', "{}"], ['{"b": -1}', '{"c": 1}']),
    ({"$defs": {"s": STR}, "$ref": "#/$defs/s", "maxLength": 2}, ['"ab"'], ['"abc"', "1"]),
    ({"allOf": [{"type": "integer", "minimum": 0}, {"maximum": 5}]}, ["0", "5"], ["-1", "6", "2.5"]),
    ({"allOf": [{"type": ["integer", "string"]}, {"type": ["number", "null"]}]}, ["3"], ['"x"', "2.5", "null"]),
    # another type's keywords assert nothing (outlines-core wrote the other type: an object, an array)
    ({"type": "string", "properties": {"a": INT}, "required": ["a"]}, ['"x"'], ['{"a": 1}']),
    ({"type": "null", "prefixItems": [INT]}, ["null"], ["[1]"]),
    ({"allOf": [{"type": ["array", "null"], "prefixItems": [INT], "items": False}, {"type": "null"}]}, ["null"], ["[1]"]),
    # a const beside an enum (the enum was written whole), in one schema and merged
    ({"allOf": [{"const": "a"}, {"enum": ["a", "b"]}]}, ['"a"'], ['"b"']),
    # draft 7's tuple: items as a list, additionalItems for the rest
    ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "items": [INT, STR],
      "additionalItems": False}, ['[1, "a"]'], ["[1]", '[1, "a", 2]', '["a", 1]']),
    # uniqueItems where no array has two items
    ({"type": "array", "items": INT, "uniqueItems": True, "maxItems": 1}, ["[]", "[1]"], ["[1, 2]"]),
    ({"type": "array", "items": INT, "uniqueItems": False}, ["[1, 1]"], []),
]


@pytest.mark.parametrize("schema, words, others", WRITTEN)
def test_rewritten_shapes_write_their_instances_and_no_other(schema, words, others):
    regex = _regex(schema)
    assert [word for word in words if not regex.fullmatch(word)] == []
    assert [word for word in others if regex.fullmatch(word)] == []


@pytest.mark.parametrize("schema", [DISJOINT, INHERITED, CLOSED], ids=["disjoint", "inherited", "closed"])
def test_merged_objects_write_only_instances(schema):
    """Random words of a merged allOf's regex all validate."""
    assert invalid_words(schema) == []


REFUSED = [
    ({"type": "array", "items": False, "minItems": 1}, "'minItems' 1 over 'maxItems' 0 at /"),
    ({"type": "object", "properties": {"a": INT, "b": False}, "required": ["b"]}, "requires 'b' at /, whose schema is false"),
    ({"type": "object", "properties": {"x": {"anyOf": [False]}}}, "'anyOf' at /properties/x of only false"),
    ({"type": "array", "prefixItems": [INT, False]}, "prefix item false at /prefixItems/1"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}},
     "'$ref' '#/$defs/Missing' at /properties/a, but it points to nothing"),
    ({"$defs": {"a/b": INT}, "$ref": "#/$defs/a~1b"}, "'$ref' '#/$defs/a~1b' at / with an escaped name"),
    ({"$defs": {"A": {"$anchor": "here", **INT}}, "items": {"$ref": "#here"}, "type": "array"},
     "'$ref' '#here' at /items to an anchor"),
    ({"$defs": {"No": False}, "type": "array", "items": {"$ref": "#/$defs/No"}}, "'$ref' '#/$defs/No' at /items to the schema false"),
    ({"type": "object", "properties": {"p": {"allOf": [{"type": "object", "properties": {"a": INT}, "required": ["a"]},
                                                       {"type": "object", "additionalProperties": False}]}}},
     "allOf .* at /properties/p has no exact merge: one part requires 'a', which another closes out"),
    ({"allOf": [{"type": "string", "pattern": "^a+$"}, {"type": "string", "pattern": "^b+$"}]},
     "at / has no exact merge: its parts give 'pattern' different values"),
    ({"allOf": [STR, INT]}, "at / has no exact merge: its parts share no type"),
    ({"allOf": [INT, False]}, "at / has no exact merge: one of its parts is the schema false"),
    ({"$defs": {"A": {"allOf": [{"$ref": "#/$defs/A"}, INT]}}, "$ref": "#/$defs/A"}, "at /\\$defs/A has no exact merge: its '\\$ref'"),
    ({"type": "array", "items": INT, "uniqueItems": True, "maxItems": 2}, "'uniqueItems' at /"),
    ({"type": "object", "properties": {"e": {"enum": []}}}, "empty 'enum' at /properties/e"),  # wrote ""
    ({"enum": ["a", "b"], "const": "a"}, "lists 'b' in 'enum' at /, which the keywords beside it ('const')"),
    ({"allOf": [{"const": "a"}, {"enum": ["b"]}]}, "at / has no exact merge: one part's const is not in"),
    # a check on a rewritten part names the user's place, not the rewrite's
    ({"type": "object", "properties": {"x": {"type": ["string", "null"], "pattern": "^a+$", "maxLength": 3}}},
     "'pattern' and 'maxLength' on one string at /properties/x;"),
    ({"allOf": [{"type": "object", "properties": {"n": {"type": "integer", "minimum": 5}}},
                {"type": "object", "properties": {"n": {"maximum": 2}}}]}, "integer bounds at /properties/n leave no integer"),
]


@pytest.mark.parametrize("schema, words", REFUSED)
def test_shapes_with_no_exact_rewrite_are_refused_by_place(schema, words):
    with pytest.raises(ValueError, match=words if "\\" in words or ".*" in words else re.escape(words)):
        ConstraintSpec.parse(json_schema=schema)


@pytest.mark.parametrize("schema, words, others", [
    ({"type": "array", "items": {"type": "boolean"}, "uniqueItems": True},
     ["[]", "[true]", "[false, true]", "[true,false]"], ["[true, true]", "[false, false, true]"]),
    ({"type": "array", "items": {"enum": ["a", 1, 1.0, True]}, "uniqueItems": True, "minItems": 2},
     ['["a", 1]', "[true, 1]", '[1, true, "a"]'], ['["a"]', "[1, 1]", "[1, 1.0]", '["a", "a"]']),
    ({"type": "array", "items": {"const": [1, True]}, "uniqueItems": True}, ["[]", "[[1, true]]"], ["[[1, true], [1, true]]"]),
    ({"type": "array", "items": {"type": ["boolean", "null"]}, "uniqueItems": True, "minItems": 3},
     ["[true, null, false]"], ["[true, null, null]", "[true, false]"]),
])
def test_unique_items_of_a_few_values_are_listed(schema, words, others):
    """uniqueItems over booleans or a short enum is written as the list of arrays of distinct
    items (1 and 1.0 are one value, true and 1 are two, as JSON Schema compares)."""
    regex = _regex(schema)
    assert [word for word in words if not regex.fullmatch(word)] == []
    assert [word for word in others if regex.fullmatch(word)] == []


def test_unique_items_over_too_many_arrays_stays_refused():
    """An enum of 5 values has 326 arrays of distinct items: over MAX_UNIQUE_ARRAYS, refused."""
    with pytest.raises(ValueError, match=re.escape("'uniqueItems' at /properties/t") + ".*short enum"):
        ConstraintSpec.parse(json_schema={"type": "object", "properties": {"t": {
            "type": "array", "items": {"enum": [1, 2, 3, 4, 5]}, "uniqueItems": True}}})
