"""JSON Schema keywords the constraint cannot enforce, found before any model work.

outlines-core's ``build_regex_from_schema`` turns a schema into a regex and ignores some keywords
without a word: an answer of such a regex can break the schema (measured on 0.2.14: ``minimum``
4 >= 5 passes, ``uniqueItems`` [1, 1] passes, ``oneOf`` of integer and number takes 1). Those
keywords are refused here by name and place (``minProperties`` {} passes too), and so are the
shapes it writes wrongly (schema_shapes.py), so every constrained answer validates against its
schema; integer and number bounds are written as exact ranges (integer_ranges.py); the rest (types,
properties, required, additionalProperties, enum, const, items,
prefixItems, min/maxItems, min/maxLength, pattern, format, anyOf, allOf merged into one schema,
$ref) is enforced by the regex; ``uniqueItems`` that asserts nothing (``false``, at most one item)
is dropped first (schema_normal.py).
"""
from __future__ import annotations

from typing import Any

from dllm.samplers.constraints.integer_ranges import BOUNDS, bounded
from dllm.samplers.constraints.schema_walk import subschemas

# keyword -> what to do instead
UNENFORCED = {
    # bounds are enforced on an integer or number of its own (integer_ranges.py), not beside other keywords
    **{key: "bound a schema of type integer or number alone (no multipleOf, enum, const or anyOf beside the bound), "
            "or drop the bound" for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")},
    "multipleOf": "drop it (or use an enum)",
    "uniqueItems": "drop it (it is written only where an array holds at most one item, or its items are "
                   "booleans or a short enum)",
    "contains": "drop it", "minContains": "drop it", "maxContains": "drop it",
    "patternProperties": "list the properties instead", "propertyNames": "list the properties instead",
    "if": "drop if / then / else", "then": "drop if / then / else", "else": "drop if / then / else",
    "not": "drop it", "oneOf": "use anyOf (the regex cannot keep the branches exclusive)",
    "dependentSchemas": "drop it", "dependencies": "drop it", "dependentRequired": "drop it",
    "minProperties": "list the properties and make them required", "maxProperties": "list the properties",
}
def unenforced_keywords(schema: Any, places: dict[int, str] | None = None) -> list[tuple[str, str]]:
    """(keyword, JSON pointer of the schema using it) for every keyword of ``UNENFORCED`` in
    ``schema`` and its subschemas (``places``: see schema_walk.subschemas)."""
    return [(key, where) for sub, where in subschemas(schema, places=places) for key in sub if key in UNENFORCED
            and not (key in BOUNDS and bounded(sub))]  # written as an exact range


def check_enforceable(schema: dict, places: dict[int, str] | None = None) -> None:
    """Refuse a schema with a keyword the constraint would ignore, naming it, where, and the fix."""
    found = unenforced_keywords(schema, places)
    if found:
        key, where = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise ValueError(f"json_schema uses {key!r} at {where}{more}, which structured output cannot enforce "
                         f"(its schema -> regex ignores it, so an answer could break the schema); {UNENFORCED[key]}")
