"""String formats written as dllm's own patterns before the schema -> regex step.

outlines-core 0.2.14's regexes for some formats admit strings that are not JSON or not of the
format: ``time`` has a literal backslash before its fraction (``"12:00:00\\5"``), ``email``'s
quoted local part and ``uri``'s ``[^\\s]`` classes let a raw ``"`` or control character into the
string, and ``date`` (and ``date-time``'s date) takes any day 01-31 of any month
(``"2019-02-30"``). These patterns are exact for dates (month lengths, leap years, no year 0000)
and RFC 3339 times (an offset is part of the format), and keep e-mail addresses and URIs to the
characters JSON writes unescaped: every match is a JSON string body of the format. ``ipv4``
(which outlines-core refuses) is written as dotted quads without leading zeros; any other string
format is refused by name and place before any model work (outlines-core keeps ``uuid`` itself).

The same copy also gives ``properties: {}`` to an object closed to every property
(``{"type": "object", "additionalProperties": false}``): outlines-core fails on it, and ``{}``
is its one instance. And a subschema that asserts nothing (``true``, ``{}``, pydantic's ``Any``
with a description) gets the list of every type: outlines-core fails on ``true`` and on an
annotation alone, and writes ``{}`` as a property or prefix item as an alternation it does not
group, so ``{"a": {}}`` let bare numbers and arrays through (measured on 0.2.14).
"""
from __future__ import annotations

import copy
from typing import Any

from dllm.samplers.constraints.schema_shapes import ASSERTIONS, DISPATCH
from dllm.samplers.constraints.schema_walk import subschemas
from dllm.samplers.constraints.token_dfa import unanchored

_YEAR = r"(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"  # 0001-9999
_MONTH_DAY = (r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
              r"|02-(?:0[1-9]|1[0-9]|2[0-8]))")
_LEAP_YEAR = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][48]|[13579][26]|[2468]0)00)"
DATE = rf"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_PCHAR = r"(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})"
FORMAT_PATTERNS = {
    "date": DATE,
    "time": TIME,
    "date-time": rf"{DATE}T{TIME}",
    "email": rf"{_ATOM}(?:\.{_ATOM})*@{_HOST}",
    "uri": (rf"(?:(?:https?|ftp)://(?:(?:[A-Za-z0-9._~!$&'()*+,;=:-]|%[0-9A-Fa-f]{{2}})*@)?(?:{_HOST}|localhost)"
            rf"(?::[0-9]+)?(?:/{_PCHAR}*)*(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
            rf"|urn:[A-Za-z0-9][A-Za-z0-9-]{{0,31}}:(?:{_PCHAR}|/)+)"),
    "ipv4": rf"{_OCTET}(?:\.{_OCTET}){{3}}",
}
# formats outlines-core writes rightly itself
OWN_FORMATS = ("uuid",)


def check_formats(schema: dict, places: dict[int, str] | None = None) -> None:
    """Refuse a string format no pattern here or in outlines-core writes, naming it and where."""
    for sub, where in subschemas(schema, places=places):
        fmt = sub.get("format")
        if _is_string(sub) and fmt not in FORMAT_PATTERNS and fmt not in OWN_FORMATS:
            known = ", ".join(sorted([*FORMAT_PATTERNS, *OWN_FORMATS]))
            raise ValueError(f"json_schema's string 'format' {fmt!r} at {where} is not one structured output "
                             f"writes ({known}); drop it, or give a 'pattern' instead")


def with_format_patterns(schema: dict) -> dict:
    """A copy of ``schema`` whose strings of a format in ``FORMAT_PATTERNS`` carry that pattern
    instead (schema_shapes.py has refused a format beside a pattern or a length already), and
    whose patterns lose their ``^`` / ``$`` anchors: the schema -> regex writes a pattern as the
    whole string (a subset of a JSON Schema pattern's matches, which may have more around them)
    and strips only a ``^ ... $`` pair, so ``^[A-Z]`` alone would be left to fail in the regex."""
    schema = copy.deepcopy(schema)
    for sub, _ in subschemas(schema):
        if _is_string(sub) and sub.get("format") in FORMAT_PATTERNS and "pattern" not in sub:
            sub["pattern"] = FORMAT_PATTERNS[sub.pop("format")]
        elif isinstance(sub.get("pattern"), str):
            sub["pattern"] = unanchored(sub["pattern"])
        if sub.get("additionalProperties") is False and next((k for k in DISPATCH if k in sub), None) == "type" \
                and sub["type"] == "object":
            sub["properties"] = {}
        _true_as_dicts(sub)
        if not set(sub) & ASSERTIONS:
            sub["type"] = list(ANY_TYPES)
    return schema


ANY_TYPES = ("string", "number", "boolean", "null", "object", "array")


def _true_as_dicts(sub: dict) -> None:
    """``true`` as ``items`` or as a property, prefix item, anyOf / allOf branch or $defs entry of
    ``sub`` becomes ``{}`` (the same: any value; given its types when the walk reaches it)."""
    if sub.get("items") is True:
        sub["items"] = {}
    for key in ("prefixItems", "anyOf", "allOf"):
        if isinstance(sub.get(key), list):
            sub[key] = [{} if item is True else item for item in sub[key]]
    for key in ("properties", "$defs", "definitions"):
        if isinstance(sub.get(key), dict):
            sub[key] = {name: {} if item is True else item for name, item in sub[key].items()}


def _is_string(sub: Any) -> bool:
    """``sub`` has a format and its ``type`` is (or lists) string: the subschemas a format applies to."""
    types = sub.get("type")
    return "format" in sub and (types == "string" or (isinstance(types, list) and "string" in types))
