"""The schema walk reaches every place a subschema can stand, with its JSON pointer: the checks and
rewrites built on it (refusals, integer ranges, formats) see a bound or keyword wherever it is. The
pointers are written out by hand here, and each one resolves (split by hand) to the schema it names."""
from __future__ import annotations

import re

import pytest

from dllm.samplers.constraints import ConstraintSpec
from dllm.samplers.constraints.schema_walk import subschemas

ONE = ("items", "additionalProperties", "unevaluatedProperties", "unevaluatedItems", "additionalItems", "not",
       "if", "then", "else", "contains", "propertyNames")
MANY = ("anyOf", "allOf", "oneOf", "prefixItems")
MAPPED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def _resolve(schema: dict, pointer: str):
    for part in pointer.strip("/").split("/") if pointer != "/" else []:
        schema = schema[int(part)] if isinstance(schema, list) else schema[part]
    return schema


def test_every_place_of_a_subschema_is_walked_with_its_pointer():
    schema = {key: {"title": key} for key in ONE}
    schema |= {key: [{"title": f"{key}0"}, {"title": f"{key}1", "not": {"title": "deep"}}] for key in MANY}
    schema |= {key: {"a": {"title": f"{key}.a"}} for key in MAPPED}
    walked = list(subschemas(schema))
    expected = ["/", *(f"/{key}" for key in ONE)]
    expected += [pointer for key in MANY for pointer in (f"/{key}/0", f"/{key}/1", f"/{key}/1/not")]
    expected += [f"/{key}/a" for key in MAPPED]
    assert sorted(where for _, where in walked) == sorted(expected)
    assert all(_resolve(schema, where) is sub for sub, where in walked)


def test_items_as_a_list_of_schemas_is_walked_too():
    schema = {"type": "array", "items": [{"type": "integer"}, {"type": "string", "uniqueItems": True}]}
    assert [where for _, where in subschemas(schema)] == ["/", "/items/0", "/items/1"]


SMALL = {"type": "integer", "minimum": 0, "maximum": 5}


@pytest.mark.parametrize("schema, inside, outside", [
    ({"type": "object", "additionalProperties": SMALL}, '{"k":5}', '{"k":6}'),
    ({"allOf": [SMALL]}, "5", "6"),
    ({"type": "array", "prefixItems": [SMALL], "minItems": 1, "maxItems": 1}, "[5]", "[6]"),
])
def test_a_bound_is_enforced_in_every_place_the_regex_writes(schema, inside, outside):
    pattern = re.compile(ConstraintSpec.parse(json_schema=schema).to_regex())
    assert pattern.fullmatch(inside) and not pattern.fullmatch(outside)


@pytest.mark.parametrize("schema, where", [
    ({"type": "object", "additionalProperties": {"type": "array", "uniqueItems": True}}, "/additionalProperties"),
    ({"allOf": [{"type": "array", "uniqueItems": True}]}, "/allOf/0"),
    ({"type": "array", "prefixItems": [{"type": "array", "uniqueItems": True}]}, "/prefixItems/0"),
])
def test_an_unenforced_keyword_is_refused_in_every_place(schema, where):
    with pytest.raises(ValueError, match=re.escape(f"'uniqueItems' at {where}")):
        ConstraintSpec.parse(json_schema=schema)
