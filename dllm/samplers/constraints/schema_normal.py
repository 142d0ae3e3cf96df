"""A schema rewritten into the shapes outlines-core's schema -> regex writes rightly, with the same
instances (as dllm writes them), and where each part stood in the schema the user sent.

Measured on outlines-core 0.2.14, each of these failed inside its regex step with no place, or
wrote the wrong values:

- keywords of another type than the subschema's (``{"type": "null", "prefixItems": ...}``) were
  written as that other type (outlines-core writes ``properties`` and ``prefixItems`` before
  ``type``); they assert nothing there and are dropped.
- keywords with no ``type`` (``{"maxLength": 2}``, ``{"items": ...}``) failed, and
  ``{"properties": ...}`` was written as an object only, though any non-object is an instance too;
  a type list beside ``properties`` (``["object", "null"]``) lost its other types. Such a subschema
  becomes ``anyOf`` of one schema per type, each with the keywords that apply to that type.
- ``false`` as ``items``, as a property or as an ``anyOf`` branch failed: ``items: false`` becomes
  ``maxItems: 0``, an optional property whose schema is false is not written (a property the
  object does not list is never written), a false branch is dropped; a required one, a false
  prefix item or an anyOf of nothing but false is refused.
- ``allOf`` of several schemas and keywords beside a ``$ref`` are merged (schema_merge.py).
- draft 7's tuple form (``items`` as a list, ``additionalItems`` for the rest) failed: it becomes
  ``prefixItems`` and ``items``, its 2020-12 spelling.
- ``uniqueItems`` where no array has two items (``maxItems`` <= 1) or ``false`` asserts nothing
  and is dropped; over items of a few values (booleans, a short enum) the arrays of distinct items
  are listed as an ``enum`` (at most ``MAX_UNIQUE_ARRAYS``); anywhere else it stays refused
  (schema_support.py).

The checks then run on the rewritten schema, and its ``places`` (id of a subschema -> JSON
pointer) name their errors by the user's places.
"""
from __future__ import annotations

import copy
import itertools
from typing import Any

from dllm.samplers.constraints.schema_merge import MergeError, json_equal, merged, needs_merge, tuple_as_prefix
from dllm.samplers.constraints.schema_walk import subschemas

# the keywords that apply to values of one type (the rest apply to every value)
TYPE_KEYWORDS = {
    "string": ("minLength", "maxLength", "pattern", "format"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "object": ("properties", "required", "additionalProperties", "patternProperties", "propertyNames",
               "minProperties", "maxProperties", "dependentRequired", "dependentSchemas", "dependencies",
               "unevaluatedProperties"),
    "array": ("items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains",
              "minContains", "maxContains", "unevaluatedItems"),
}
TYPE_KEYWORDS["integer"] = TYPE_KEYWORDS["number"]
_TYPED = frozenset(key for keys in TYPE_KEYWORDS.values() for key in keys)
ALL_TYPES = ("string", "number", "boolean", "null", "object", "array")
# keywords about every value that outlines-core writes a subschema from before its type (or refused)
GENERAL = frozenset({"enum", "const", "$ref", "anyOf", "allOf", "oneOf", "not", "if", "then", "else"})
# the most arrays of distinct items listed for uniqueItems (an enum of 4 values: 65 arrays)
MAX_UNIQUE_ARRAYS = 100
# what an items schema of a few values may hold besides them
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment"})


def normal_form(schema: dict) -> tuple[dict, dict[int, str]]:
    """A rewritten copy of ``schema`` (see the module) and the places of its parts; a shape with no
    exact rewrite raises ValueError naming its place and the fix."""
    memo: dict = {}
    normal = copy.deepcopy(schema, memo)  # memo keeps every copied part alive: ids stay unique
    places = {id(memo[id(sub)]): _pointer(where) for sub, where in subschemas(schema)}
    for sub, where in subschemas(normal, places=places):
        _normalize(sub, _pointer(where), normal, places)
    return normal, places


def _pointer(where: str) -> str:
    return "" if where == "/" else where


def _normalize(sub: dict, where: str, root: dict, places: dict[int, str]) -> None:
    """``sub`` rewritten in place; the walk goes on into what it holds now."""
    if needs_merge(sub):
        try:
            whole = merged(sub, root)
        except MergeError as err:
            raise ValueError(f"json_schema's allOf (or $ref with keywords beside it) at {where or '/'} has no "
                             f"exact merge: {err}") from None
        sub.clear()
        sub.update(whole)
    tuple_as_prefix(sub)  # draft 7's tuple
    _without_false(sub, where)
    if sub.get("uniqueItems") is False or (sub.get("uniqueItems") is True and sub.get("maxItems", 2) <= 1):
        del sub["uniqueItems"]
    arrays = _unique_arrays(sub, where)
    if arrays is not None:
        for key in ("items", "uniqueItems", "minItems", "maxItems"):
            sub.pop(key, None)
        sub["enum"] = arrays
    if isinstance(sub.get("type"), str):  # another type's keywords assert nothing here
        for key in [key for key in sub if key in _TYPED and key not in TYPE_KEYWORDS.get(sub["type"], ())]:
            del sub[key]
    views = _type_views(sub)
    if views is not None:
        for view in views:
            places[id(view)] = where
        for key in [key for key in sub if key == "type" or key in _TYPED]:
            del sub[key]
        sub["anyOf"] = views


def _without_false(sub: dict, where: str) -> None:
    """``false`` as items, property, anyOf branch or $defs entry rewritten or refused."""
    if sub.get("items") is False and "prefixItems" not in sub:
        del sub["items"]
        sub["maxItems"] = 0  # a minItems above it is refused as bounds no value meets
    if isinstance(sub.get("properties"), dict):
        required = sub.get("required") if isinstance(sub.get("required"), list) else []
        needed = [name for name, value in sub["properties"].items() if value is False and name in required]
        if needed:
            raise ValueError(f"json_schema requires {needed[0]!r} at {where or '/'}, whose schema is false (no value "
                             "meets it); drop it from required or give it a schema")
        sub["properties"] = {name: value for name, value in sub["properties"].items() if value is not False}
    if isinstance(sub.get("anyOf"), list) and False in sub["anyOf"]:
        sub["anyOf"] = [branch for branch in sub["anyOf"] if branch is not False]
        if not sub["anyOf"]:
            raise ValueError(f"json_schema has 'anyOf' at {where or '/'} of only false schemas, which no value meets; "
                             "give it a schema")
    if isinstance(sub.get("prefixItems"), list) and False in sub["prefixItems"]:
        raise ValueError(f"json_schema has a prefix item false at {where}/prefixItems/"
                         f"{sub['prefixItems'].index(False)}, which its schema -> regex cannot write (it writes "
                         "every prefix item); shorten prefixItems to the items before it")
    for key in ("$defs", "definitions"):
        if isinstance(sub.get(key), dict):  # a ref to a false one is refused (schema_refs.py)
            sub[key] = {name: value for name, value in sub[key].items() if value is not False}


def _type_views(sub: dict) -> list[dict] | None:
    """One schema per type ``sub`` allows, each with its type's keywords, when ``sub`` has keywords
    of a type but no single ``type`` (None: it has one, or no such keyword, or a general one)."""
    if set(sub) & GENERAL:
        return None
    if isinstance(sub.get("type"), list) and len(sub["type"]) == 1:
        sub["type"] = sub["type"][0]
    types = sub.get("type", list(ALL_TYPES))
    if not isinstance(types, list) or not set(sub) & _TYPED:
        return None
    if "number" in types:
        types = [t for t in types if t != "integer"]  # every integer is a number
    return [{"type": t, **{key: sub[key] for key in TYPE_KEYWORDS.get(t, ()) if key in sub}} for t in types]


def _unique_arrays(sub: dict, where: str) -> list[list] | None:
    """Every array of distinct items ``sub`` (an array with ``uniqueItems``) allows, when its items
    take a few values and the arrays number at most ``MAX_UNIQUE_ARRAYS`` (None otherwise); a
    ``minItems`` over the values' count is refused by its keywords, not as the empty enum it makes."""
    if sub.get("uniqueItems") is not True or sub.get("type") != "array" or set(sub) & (GENERAL | {"prefixItems"}):
        return None
    values = _few_values(sub.get("items"))
    if values is None:
        return None
    low, high = sub.get("minItems", 0), min(sub.get("maxItems", len(values)), len(values))
    if low > len(values) and low <= sub.get("maxItems", low):  # minItems over maxItems: refused as such
        raise ValueError(f"json_schema has 'uniqueItems' at {where or '/'} with 'minItems' {low}, but its items take "
                         f"{len(values)} distinct values, so no array meets them; lower minItems or drop uniqueItems")
    counts = [len(list(itertools.permutations(range(len(values)), k))) for k in range(low, high + 1)]
    if sum(counts) > MAX_UNIQUE_ARRAYS:
        return None
    return [list(order) for k in range(low, high + 1) for order in itertools.permutations(values, k)]


def _few_values(items: Any) -> list | None:
    """The distinct values an items schema of only an enum, a const, or type boolean or null allows
    (JSON equality: 1 and 1.0 are one value, true and 1 are two); None for any other schema."""
    if not isinstance(items, dict) or len(set(items) - _ANNOTATIONS) != 1:
        return None
    if isinstance(items.get("enum"), list):
        values = items["enum"]
    elif "const" in items:
        values = [items["const"]]
    else:
        kinds = items.get("type") if isinstance(items.get("type"), list) else [items.get("type")]
        if not all(kind in ("boolean", "null") for kind in kinds):
            return None
        values = [value for kind in kinds for value in ([True, False] if kind == "boolean" else [None])]
    distinct: list = []
    for value in values:
        if not any(json_equal(value, seen) for seen in distinct):
            distinct.append(value)
    return distinct
