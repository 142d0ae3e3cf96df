"""Every subschema of a JSON schema with its JSON pointer: the one walk the schema checks and
rewrites (schema_support.py, schema_shapes.py, schema_formats.py, integer_ranges.py) share."""
from __future__ import annotations

from typing import Any, Iterator

# keywords whose value is a subschema, a list of them, or a mapping name -> subschema
_ONE = ("items", "additionalProperties", "unevaluatedProperties", "unevaluatedItems", "additionalItems",
        "not", "if", "then", "else", "contains", "propertyNames")
_MANY = ("anyOf", "allOf", "oneOf", "prefixItems", "items")
_MAPPED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def subschemas(schema: Any, path: str = "", places: dict[int, str] | None = None) -> Iterator[tuple[dict, str]]:
    """Every (sub)schema object in ``schema`` with its JSON pointer, ``schema`` first, depth first.
    ``places`` (id of a subschema -> pointer) names where a rewritten schema's parts stood in the
    schema the user sent (schema_normal.py); a part not in it is named from its parent's place."""
    if not isinstance(schema, dict):
        return
    if places:
        path = places.get(id(schema), path)
    yield schema, path or "/"
    for key in _ONE:
        if isinstance(schema.get(key), dict):
            yield from subschemas(schema[key], f"{path}/{key}", places)
    for key in _MANY:
        if isinstance(schema.get(key), list):
            for i, sub in enumerate(schema[key]):
                yield from subschemas(sub, f"{path}/{key}/{i}", places)
    for key in _MAPPED:
        if isinstance(schema.get(key), dict):
            for name, sub in schema[key].items():
                yield from subschemas(sub, f"{path}/{key}/{name}", places)
