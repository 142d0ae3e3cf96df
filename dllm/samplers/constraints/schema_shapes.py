"""JSON Schema shapes that outlines-core's schema -> regex writes wrongly, refused before any
model work with their place and the fix.

Measured on outlines-core 0.2.14: each subschema is written from the first of ``properties``,
``allOf``, ``anyOf``, ``prefixItems``, ``enum``, ``const``, ``$ref``, ``type`` it holds, and what
stands beside that keyword is dropped (``properties`` with ``anyOf`` ignores the anyOf; a string
keeps one of ``pattern``, ``format`` and min/maxLength; ``enum`` writes its values whatever the
``type`` says); a ``pattern`` and a property name go into the JSON text unescaped (``"`` ends the string
early, ``\\b`` reads back as a backspace); a ``required`` name missing from ``properties`` is never
written; ``minItems`` over ``maxItems`` (or ``minLength`` over ``maxLength``) writes no word, or
fails. Every one of these would let a constrained answer break its schema. The checks see the
schema as schema_normal.py rewrites it (allOf merged, keywords with no type split by type), named by
the places of the schema the user sent.
"""
from __future__ import annotations

from typing import Any

from dllm.samplers.constraints.lexer import live_states
from dllm.samplers.constraints.schema_support import UNENFORCED
from dllm.samplers.constraints.schema_walk import subschemas

# the keyword outlines-core writes a subschema from, first present wins
DISPATCH = ("properties", "allOf", "anyOf", "prefixItems", "enum", "const", "$ref", "type")
# keywords that assert something about an instance (the rest are annotations or unknown: ignored by
# validators as well)
ASSERTIONS = frozenset({
    "type", "enum", "const", "pattern", "format", "minLength", "maxLength", "items", "prefixItems", "minItems",
    "maxItems", "additionalItems", "unevaluatedItems", "properties", "required", "additionalProperties",
    "unevaluatedProperties", "allOf", "anyOf", "$ref", *UNENFORCED})
# what the regex still reads beside the keyword it writes a subschema from, and where the rest goes
READ_BESIDE = {"properties": {"type", "required", "additionalProperties"}, "allOf": set(), "anyOf": set(),
               "$ref": set(), "prefixItems": {"type", "items", "minItems", "maxItems"}}
MOVE_TO = {"properties": "into the properties' own schemas, or drop them", "allOf": "into the allOf schema",
           "anyOf": "into each anyOf branch", "$ref": "into the referenced schema",
           "prefixItems": "into the prefix items' schemas"}
# a string's keywords of which the regex keeps one group
STRING_GROUPS = (("pattern",), ("format",), ("minLength", "maxLength"))
# characters JSON writes escaped inside a string
JSON_ESCAPED = ('"', "\\", *map(chr, range(0x20)))


def shape_errors(schema: dict, places: dict[int, str] | None = None) -> list[str]:
    """What the schema -> regex would write wrongly, one sentence each, with its JSON pointer."""
    validator = _validator(schema)
    errors: list[str] = []
    for sub, where in subschemas(schema, places=places):
        kept = next((key for key in DISPATCH if key in sub), None)
        if kept in READ_BESIDE:
            dropped = sorted((set(sub) & ASSERTIONS) - {kept} - READ_BESIDE[kept] - set(UNENFORCED))
            if dropped:
                errors.append(f"has {', '.join(map(repr, dropped))} beside {kept!r} at {where}, which its "
                              f"schema -> regex drops (it writes the subschema from {kept!r} alone); move them "
                              f"{MOVE_TO[kept]}")
        if kept == "prefixItems":
            errors += _prefix_errors(sub, where)
        for low, high in (("minItems", "maxItems"), ("minLength", "maxLength")):
            if isinstance(sub.get(low), int) and isinstance(sub.get(high), int) and sub[low] > sub[high]:
                errors.append(f"has {low!r} {sub[low]} over {high!r} {sub[high]} at {where}, which no value "
                              "meets; widen them")
        if kept == "enum" and sub["enum"] == []:
            errors.append(f"has an empty 'enum' at {where}, which no value meets (its schema -> regex writes the "
                          "empty answer); list a value")
        if kept in ("enum", "const"):
            errors += _value_errors(sub, where, kept, validator)
        if kept == "type":
            groups = [next(key for key in group if key in sub) for group in STRING_GROUPS
                      if any(key in sub for key in group)]
            if len(groups) > 1:
                errors.append(f"has {' and '.join(map(repr, groups))} on one string at {where}; its schema -> "
                              "regex keeps only one of pattern, format and min/maxLength; keep one (a length "
                              "can go into the pattern: ^[a-z]{2,8}$)")
        if kept in ("properties", "type") and isinstance(sub.get("required"), list):
            missing = [name for name in sub["required"] if name not in (sub.get("properties") or {})]
            if missing:
                errors.append(f"requires {missing[0]!r} at {where}, which its 'properties' does not define, so "
                              "its schema -> regex never writes it; define the property")
        if isinstance(sub.get("pattern"), str):
            char = pattern_writes_escaped(sub["pattern"])
            if char is not None:
                errors.append(f"has a 'pattern' at {where} ({sub['pattern'][:80]!r}) that matches {char!r}, which "
                              "its schema -> regex writes into the JSON string unescaped (ending it early, or "
                              "read back as another character); keep quotes, backslashes and control "
                              "characters out of the pattern (e.g. [^\"\\\\] for .)")
        names = sub.get("properties") if isinstance(sub.get("properties"), dict) else {}
        for name in names:
            if any(char in name for char in JSON_ESCAPED):
                errors.append(f"has a property name {name!r} at {where} that JSON writes escaped, which its "
                              "schema -> regex writes unescaped (not JSON); rename the property")
    return errors


def check_shapes(schema: dict, places: dict[int, str] | None = None) -> None:
    """Refuse a schema the schema -> regex would write wrongly, naming where and the fix."""
    refuse_first(shape_errors(schema, places))


def refuse_first(errors: list[str]) -> None:
    """Raise the first of ``errors`` (sentences that name a place and a fix), counting the rest."""
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ValueError(f"json_schema {errors[0]}{more}")


def pattern_writes_escaped(pattern: str) -> str | None:
    """The first character JSON must escape that some match of ``pattern`` holds (None: none, or
    the pattern does not parse: compiling the regex refuses it then), its anchors dropped as
    schema_formats.py drops them."""
    from dllm.samplers.constraints.token_dfa import _interegular, unanchored

    try:
        fsm = _interegular().parse_pattern(unanchored(pattern)).to_fsm()
    except Exception:  # noqa: BLE001  interegular's own parse errors: reported when the regex compiles
        return None
    live = live_states(fsm)
    reachable, frontier = {fsm.initial}, [fsm.initial]
    while frontier:
        for target in fsm.map.get(frontier.pop(), {}).values():
            if target in live and target not in reachable:
                reachable.add(target)
                frontier.append(target)
    for char in JSON_ESCAPED:
        symbol = fsm.alphabet[char]
        if any(fsm.map.get(state, {}).get(symbol) in live for state in reachable & live):
            return char
    return None


def _prefix_errors(sub: dict, where: str) -> list[str]:
    """prefixItems is written as exactly its items: min/maxItems must allow that many."""
    count = len(sub["prefixItems"]) if isinstance(sub["prefixItems"], list) else 0
    if sub.get("minItems", 0) > count or sub.get("maxItems", count) < count:
        return [f"has 'prefixItems' of {count} at {where} with min/maxItems that exclude {count} items; its "
                f"schema -> regex writes exactly the {count} prefix items; make the bounds allow {count}"]
    return []


def _value_errors(sub: dict, where: str, kept: str, validator) -> list[str]:
    """enum / const values are written as listed: each must satisfy the keywords beside them (a
    ``$ref`` among them resolved in the whole schema, as ``validator``, the whole schema's, does)."""
    from referencing.exceptions import Unresolvable

    rest = {key: value for key, value in sub.items() if key in ASSERTIONS and key != kept}
    if not rest:
        return []
    values = sub["enum"] if kept == "enum" else [sub["const"]]
    if not isinstance(values, list):
        return []
    check = validator.evolve(schema=rest)
    try:
        broken = [value for value in values if not check.is_valid(value)]
    except Unresolvable as err:
        return [f"has a '$ref' at {where} (or inside it) to {err.ref!r}, which is nothing in the schema; define "
                "what it points to"]
    if not broken:
        return []
    return [f"lists {broken[0]!r} in {kept!r} at {where}, which the keywords beside it "
            f"({', '.join(map(repr, sorted(rest)))}) refuse; its schema -> regex writes the listed values as they "
            "are, so drop the value or the keyword"]


def _validator(schema: dict) -> Any:
    """A validator of the whole ``schema``: its ``evolve(schema=sub)`` checks ``sub`` with refs
    resolved in ``schema``."""
    import jsonschema

    return jsonschema.validators.validator_for(schema)(schema)
