"""An allOf's parts merged by JSON equality (schema_merge.py): Python's ``==`` holds ``true == 1``
and ``false == 0``, so two parts whose const, enum or property schema differed only there were
taken as one, and the regex wrote a value one part refuses (``true`` for ``allOf: [{"const": 1},
{"const": true}]``, which no value meets). And draft 7's tuple form (``items`` as a list) inside
an allOf crashed the merge with an AttributeError instead of a refusal by place. A rewrite's own
keywords (the enum that lists uniqueItems' arrays) are not what a refusal names."""
from __future__ import annotations

import json
import re

import jsonschema
import pytest

from dllm.samplers.constraints import ConstraintSpec

INT, STR = {"type": "integer"}, {"type": "string"}
DRAFT7 = "http://json-schema.org/draft-07/schema#"


@pytest.mark.parametrize("schema", [
    {"allOf": [{"const": 1}, {"const": True}]},
    {"allOf": [{"const": 0}, {"const": False}]},
    {"allOf": [{"enum": [1]}, {"enum": [True]}]},
    {"allOf": [{"const": [1]}, {"const": [True]}]},
    {"type": "object", "required": ["a"],
     "allOf": [{"properties": {"a": {"const": 1}}}, {"properties": {"a": {"const": True}}}]},
    {"type": "array", "minItems": 1, "allOf": [{"items": {"const": 1}}, {"items": {"const": True}}]},
], ids=["const", "const-false", "enum", "nested", "property", "items"])
def test_parts_equal_only_in_python_have_no_merge(schema):
    """No value meets both parts (jsonschema agrees); the merge refuses instead of writing one."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    assert not any(validator.is_valid(value) for value in (1, 0, True, False, [1], [True], {"a": 1}, {"a": True}))
    with pytest.raises(ValueError, match=re.escape("has no exact merge")):
        ConstraintSpec.parse(json_schema=schema)


def test_an_equal_number_written_two_ways_still_merges():
    """1 and 1.0 are one JSON value: parts that differ only so merge (as before)."""
    schema = {"allOf": [{"const": 1}, {"const": 1.0}]}
    regex = re.compile(ConstraintSpec.parse(json_schema=schema).to_regex())
    assert regex.fullmatch("1") or regex.fullmatch("1.0")
    assert not regex.fullmatch("true")


@pytest.mark.parametrize("schema, words, others", [
    ({"$schema": DRAFT7, "allOf": [{"type": "array", "items": [INT], "additionalItems": False},
                                   {"type": "array", "maxItems": 1}]}, ["[1]"], ['["a"]', "[1, 2]"]),
    ({"$schema": DRAFT7, "allOf": [{"type": "array", "items": [INT, STR]}, {"type": "array", "minItems": 2}]},
     ['[1, "a"]'], ['["a", 1]', "[1]"]),
])
def test_draft7_tuples_in_an_allof_merge(schema, words, others):
    validator = jsonschema.validators.validator_for(schema)(schema)
    regex = re.compile(ConstraintSpec.parse(json_schema=schema).to_regex())
    assert all(validator.is_valid(json.loads(word)) and regex.fullmatch(word) for word in words)
    assert not any(regex.fullmatch(word) for word in others)


def test_draft7_tuple_beside_items_of_another_part_is_refused_by_place():
    """Draft 7's items schema holds for every item, the tuple's too: no exact merge, said by place."""
    schema = {"$schema": DRAFT7, "type": "object", "properties": {"t": {"allOf": [
        {"type": "array", "items": [INT, STR]}, {"type": "array", "items": INT}]}}}
    with pytest.raises(ValueError, match=re.escape("at /properties/t has no exact merge")):
        ConstraintSpec.parse(json_schema=schema)


@pytest.mark.parametrize("schema, where", [
    ({"type": "array", "items": {"type": "boolean"}, "uniqueItems": True, "minItems": 3}, "/"),
    ({"type": "object", "properties": {"p": {"type": "array", "items": {"enum": ["a", 1, 1.0]}, "uniqueItems": True,
                                             "minItems": 3, "maxItems": 4}}}, "/properties/p"),
])
def test_unique_items_over_fewer_values_than_min_items_names_the_sent_keywords(schema, where):
    """No array of distinct items is long enough; the refusal names uniqueItems and minItems as
    sent, not the empty enum the listing of arrays made (which the user never wrote)."""
    with pytest.raises(ValueError, match=re.escape(f"'uniqueItems' at {where} with 'minItems' ")) as refused:
        ConstraintSpec.parse(json_schema=schema)
    assert "enum" not in str(refused.value)


@pytest.mark.parametrize("schema, words, others", [
    ({"allOf": [{"type": ["object", "string"], "additionalProperties": False}, {"properties": {"a": INT}, "required": ["a"]}]},
     ['"x"'], ["{}", '{"a": 1}', "1"]),
    ({"allOf": [{"additionalProperties": False}, {"required": ["a"]}]}, ["1", '"x"', "null", "[1]", "true"], ["{}", '{"a": 1}']),
])
def test_parts_no_object_meets_keep_their_other_types(schema, words, others):
    """A required name that another part closes out leaves no object, but values of the parts'
    other types are instances: the merge keeps those types, where it said no value met them."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    regex = re.compile(ConstraintSpec.parse(json_schema=schema).to_regex())
    assert [word for word in words if not (validator.is_valid(json.loads(word)) and regex.fullmatch(word))] == []
    assert [word for word in others if regex.fullmatch(word)] == []


@pytest.mark.parametrize("schema", [
    {"allOf": [{"type": "array", "items": INT}, {"type": "array", "prefixItems": [STR], "items": INT}]},
    {"allOf": [{"type": "array", "items": False}, {"type": "array", "prefixItems": [STR], "items": False}]},
], ids=["items", "false"])
def test_items_of_every_item_beside_another_parts_prefix_is_refused(schema):
    """One part's items hold from the first item; merged beside another part's prefixItems they
    would hold only after it, and the regex wrote ["x"], which the first part refuses."""
    assert not jsonschema.validators.validator_for(schema)(schema).is_valid(["x"])
    with pytest.raises(ValueError, match=re.escape("one part has 'prefixItems' and another 'items'")):
        ConstraintSpec.parse(json_schema=schema)


def test_a_prefix_alone_beside_a_prefix_with_items_merges():
    """A part with prefixItems and no items allows any items after them: the other part's items
    are the merge's (this order was refused). The regex writes the prefix items alone, as for one
    schema of prefixItems."""
    schema = {"allOf": [{"type": "array", "prefixItems": [INT], "items": STR}, {"type": "array", "prefixItems": [INT]}]}
    regex = re.compile(ConstraintSpec.parse(json_schema=schema).to_regex())
    assert regex.fullmatch("[1]") and not any(regex.fullmatch(word) for word in ("[1, 2]", '["a"]'))
