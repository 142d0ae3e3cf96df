"""``allOf`` (and a ``$ref`` with keywords beside it) merged into one schema where the merge is
exact, so the schema -> regex writes one answer that meets every part.

outlines-core 0.2.14 writes ``allOf`` of two schemas as one answer after the other
(``{"a":1}{"b":2}``, not JSON) and drops what stands beside a ``$ref``; pydantic and OpenAPI
generators emit both (``allOf: [{"$ref": Base}, {"properties": ...}]`` for inheritance). The parts
(refs looked up, nested allOf flattened, ``true`` dropped) become one schema: types intersected,
``required`` joined, properties joined name by name (a name in several parts gets the ``allOf`` of
its schemas, merged in turn), a part closed by ``additionalProperties: false`` keeps out the other
parts' names (a required one it keeps out leaves no object, only the parts' other types), lower
bounds take the highest and upper bounds the lowest, enums intersected, any
other keyword equal in every part that has it. What has no exact merge (two different patterns, a
``prefixItems`` beside another part's ``items``, ``additionalProperties`` as a schema) raises
MergeError with the reason and fix.
"""
from __future__ import annotations

from typing import Any

from dllm.samplers.constraints.schema_refs import RefError, resolve
from dllm.samplers.constraints.schema_shapes import ASSERTIONS
from dllm.samplers.constraints.schema_walk import subschemas

LOWER = ("minLength", "minItems", "minimum", "exclusiveMinimum", "minProperties", "minContains")
UPPER = ("maxLength", "maxItems", "maximum", "exclusiveMaximum", "maxProperties", "maxContains")
# a $ref with only these beside it is written from the enum / const, checked against the ref
WRITTEN_BEFORE_REF = frozenset({"enum", "const"})
# the types of a merge with no type, but for objects (when no object meets its parts)
OTHER_TYPES = ("string", "number", "boolean", "null", "array")


class MergeError(ValueError):
    """The parts of an allOf have no exact merge; the message says why and what to do."""


def needs_merge(sub: dict) -> bool:
    """``sub`` has allOf of several schemas, or allOf or a ``$ref`` with assertions beside it."""
    beside = (set(sub) & ASSERTIONS) - {"allOf", "$ref"}
    if isinstance(sub.get("allOf"), list):
        return len(sub["allOf"]) > 1 or bool(beside) or "$ref" in sub
    return isinstance(sub.get("$ref"), str) and bool(beside - WRITTEN_BEFORE_REF)


def merged(sub: dict, root: dict) -> dict:
    """One schema whose instances are exactly those of every part of ``sub`` (see the module)."""
    parts = _parts(sub, root, sub, ())
    out: dict[str, Any] = {}
    types: list[str] | None = None
    properties: dict[str, list] = {}
    closed: list[set[str]] = []
    required: list[str] = []
    items_of_all = False  # a part's items hold from the first item (it has no prefixItems)
    for part in parts:
        for key, value in part.items():
            if key == "type":
                types = _types(value) if types is None else _meet(types, _types(value))
            elif key == "properties":
                for name, schema in value.items():
                    properties.setdefault(name, []).append(schema)
            elif key == "required":
                required += [name for name in value if name not in required]
            elif key == "additionalProperties":
                closed += [set(part.get("properties") or {})] if value is False else []
                if value not in (True, False, {}):
                    raise MergeError("one of its parts has 'additionalProperties' as a schema, which the merge "
                                     "cannot write beside the other parts' properties; list those properties")
            elif key in ("items", "prefixItems"):
                items_of_all |= key == "items" and "prefixItems" not in part and value not in (True, {})
                _items(out, key, value)
            else:
                _keyword(out, key, value)
    if items_of_all and "prefixItems" in out:  # merged, its items would start after the prefix
        raise MergeError("one part has 'prefixItems' and another 'items', which apply to different items once "
                         "merged; put them in one part")
    if "const" in out and "enum" in out:  # the const, if the enum lists it
        if not any(json_equal(out["const"], value) for value in out.pop("enum")):
            raise MergeError("one part's const is not in another's enum, so no value meets them all; make them agree")
    if types is not None and not types:
        raise MergeError("its parts share no type, so no value meets them all; make the types agree")
    shut = _object(out, properties, closed, required)
    if shut is not None:  # no object meets every part; the values of its other types do
        types = [t for t in (types or OTHER_TYPES) if t != "object"]
        if not types:
            raise MergeError(f"one part requires {shut!r}, which another closes out (additionalProperties false "
                             "without it), so no value meets them all; list it in both")
        for key in ("properties", "required", "additionalProperties"):
            out.pop(key, None)
    if types is not None:
        out["type"] = types[0] if len(types) == 1 else types
    return out


def _parts(schema: Any, root: dict, sub: dict, chain: tuple[str, ...]) -> list[dict]:
    """The dicts whose conjunction ``schema`` is: its ``$ref`` target's parts, its allOf's parts,
    then its own other keywords."""
    if schema is True:
        return []
    if schema is False:
        raise MergeError("one of its parts is the schema false, which no value meets; drop that part")
    parts = []
    ref = schema.get("$ref")
    if isinstance(ref, str):
        if ref in chain:
            raise MergeError(f"its '$ref' {ref!r} comes back to itself through allOf, which has no merge; "
                             "break the cycle")
        try:
            target = resolve(root, ref)
        except RefError as err:
            raise MergeError(f"its '$ref' {ref!r}: {err}; define it") from None
        if any(inner is sub for inner, _ in subschemas(target)):
            raise MergeError(f"its '$ref' {ref!r} points to a schema that holds this one, so merging the "
                             "keywords beside it would nest it in itself; move them into the referenced schema")
        parts += _parts(target, root, sub, (*chain, ref))
    for branch in schema.get("allOf") or []:
        parts += _parts(branch, root, sub, chain)
    rest = tuple_as_prefix({key: value for key, value in schema.items() if key not in ("$ref", "allOf")})
    return parts + [rest] if rest else parts


def tuple_as_prefix(sub: dict) -> dict:
    """``sub`` with draft 7's tuple (``items`` as a list, ``additionalItems`` for the rest) in its
    2020-12 spelling, ``prefixItems`` and ``items``, in place."""
    if isinstance(sub.get("items"), list):
        sub["prefixItems"] = sub.pop("items")
        if "additionalItems" in sub:
            sub["items"] = sub.pop("additionalItems")
    return sub


def _types(value: Any) -> list[str]:
    return list(value) if isinstance(value, list) else [value]


def _meet(a: list[str], b: list[str]) -> list[str]:
    """The types of values of a type in ``a`` and of a type in ``b`` (an integer is a number)."""
    both = [t for t in a if t in b]
    if "integer" not in both and (("integer" in a and "number" in b) or ("number" in a and "integer" in b)):
        both.append("integer")
    return both


def _items(out: dict, key: str, value: Any) -> None:
    """``items`` of two parts: every item meets both (false wins, true yields); ``prefixItems``
    must be equal."""
    if key not in out or json_equal(out[key], value) or value is True:
        out.setdefault(key, value)
        return
    if key == "prefixItems":
        raise MergeError("its parts give different 'prefixItems'; merge them by hand")
    if out[key] is True or value is False:
        out[key] = value
    elif out[key] is not False:
        out[key] = {"allOf": [out[key], value]}


def _keyword(out: dict, key: str, value: Any) -> None:
    """Any other keyword of a part into ``out``."""
    if key not in out or json_equal(out[key], value):  # not ==: true == 1 in Python, not in JSON
        out[key] = value
    elif key in LOWER:
        out[key] = max(out[key], value)
    elif key in UPPER:
        out[key] = min(out[key], value)
    elif key == "enum" and isinstance(value, list):
        out[key] = [v for v in out[key] if any(json_equal(v, w) for w in value)]
        if not out[key]:
            raise MergeError("its parts' enums share no value; make them share one")
    elif key in ASSERTIONS:
        raise MergeError(f"its parts give {key!r} different values, which the merge cannot write as one; "
                         "merge that keyword by hand")


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality, as JSON Schema's enum and uniqueItems compare: 1 == 1.0, but true is not 1,
    in arrays and objects too."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[key], b[key]) for key in a)
    return type(a) is type(b) and a == b


def _object(out: dict, properties: dict[str, list], closed: list[set[str]], required: list[str]) -> str | None:
    """The merged properties, required and additionalProperties into ``out``; a required name a
    closed part keeps out, if any (then no object is an instance)."""
    allowed = set.intersection(*closed) if closed else None
    merged_properties = {}
    for name, schemas in properties.items():
        if allowed is not None and name not in allowed:
            continue
        kept = [s for s in schemas if s is not True and s != {}]
        distinct = [s for i, s in enumerate(kept) if not any(json_equal(s, seen) for seen in kept[:i])]
        merged_properties[name] = {} if not distinct else distinct[0] if len(distinct) == 1 else {"allOf": distinct}
    if allowed is not None:
        shut = [name for name in required if name not in allowed]
        if shut:
            return shut[0]
        out["additionalProperties"] = False
    if properties:
        out["properties"] = merged_properties
    if required:
        out["required"] = required
    return None
