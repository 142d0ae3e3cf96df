"""``$ref`` targets, looked up in the schema itself, and the refs refused before any model work.

outlines-core 0.2.14 resolves a ``$ref`` that is ``#`` or a plain JSON pointer (``#/$defs/Item``,
after an ``$id`` too) and fails inside its regex step, with no place, on one to nothing
(``#/$defs/Missing``), on a pointer with escapes (``~1``, ``%24``) and on an anchor (``#name``); a
ref to the schema ``false`` has no value to write. Those are refused here by place, naming the ref.
"""
from __future__ import annotations

from typing import Any, Callable

from dllm.samplers.constraints.schema_walk import subschemas


class RefError(ValueError):
    """A ``$ref`` that names nothing in the schema (or nothing outlines-core can reach)."""


def resolve(root: dict, ref: str) -> Any:
    """What ``ref`` points to in ``root`` (a schema or ``true`` / ``false``), resolved as jsonschema
    resolves it (the root's ``$id`` and ``$schema`` honoured); RefError when it points nowhere."""
    return resolver(root)(ref)


def resolver(root: dict) -> Callable[[str], Any]:
    """``resolve`` for many refs of one schema: the schema's registry is built once."""
    from referencing import Registry, Resource
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    resource = Resource.from_contents(root, default_specification=DRAFT202012)
    base = resource.id() or ""
    lookup = Registry().with_resource(base, resource).crawl().resolver(base_uri=base).lookup

    def find(ref: str) -> Any:
        try:
            return lookup(ref).contents
        except Unresolvable as err:
            raise RefError(f"it points to nothing in the schema ({type(err).__name__})") from None
    return find


def ref_errors(schema: dict) -> list[str]:
    """One sentence per ``$ref`` the schema -> regex cannot write, with its place and the fix."""
    errors, find = [], resolver(schema)
    for sub, where in subschemas(schema):
        ref = sub.get("$ref")
        if not isinstance(ref, str):
            continue
        fragment = ref.partition("#")[2]
        if fragment and not fragment.startswith("/"):
            errors.append(f"has a '$ref' {ref!r} at {where} to an anchor, which its schema -> regex cannot "
                          "follow; point to the schema with a JSON pointer (#/$defs/Name)")
            continue
        if "~" in fragment or "%" in fragment:
            errors.append(f"has a '$ref' {ref!r} at {where} with an escaped name (~ or %), which its schema -> "
                          "regex cannot follow; rename the definition to plain letters, digits, _ or -")
            continue
        try:
            target = find(ref)
        except RefError as err:
            errors.append(f"has a '$ref' {ref!r} at {where}, but {err}; define it (under $defs) or fix the ref")
            continue
        if target is False:
            errors.append(f"has a '$ref' {ref!r} at {where} to the schema false, which no value meets; drop the "
                          "property or give the definition a schema")
    return errors

