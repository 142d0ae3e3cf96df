"""Integer bounds (``minimum`` / ``maximum`` / ``exclusiveMinimum`` / ``exclusiveMaximum``) as an
exact regex of the integers JSON writes in that range.

outlines-core 0.2.14 writes every integer as ``-?(0|[1-9][0-9]*)`` and ignores its bounds, so
pydantic's ``Field(ge=0, le=120)`` could answer -5. A bounded integer subschema is swapped for a
string ``const`` placeholder before the schema -> regex step, and the placeholder (quotes
included) is replaced in the regex by the range's own pattern: canonical integers (no leading
zeros, no ``-0``) from the lower bound to the upper, either side open. ``multipleOf``, number
bounds and bounds beside another keyword the regex writes from stay refused (schema_support.py).
"""
from __future__ import annotations

import copy
import math
from numbers import Real
from typing import Any

from dllm.samplers.constraints.schema_walk import subschemas

BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
# keywords the schema -> regex writes a subschema from before its type: bounds beside them are not read
_WRITTEN_FIRST = ("properties", "allOf", "anyOf", "prefixItems", "enum", "const", "$ref")
_PLACEHOLDER = "dllmintrange{}x"  # letters only: written verbatim in the regex, never a real answer


def integer_bounds(sub: Any) -> tuple[int | None, int | None] | None:
    """(lowest, highest) integer a ``{"type": "integer", ...bounds}`` subschema allows (None: open);
    None when ``sub`` is not such a subschema (no bound, another type, ``multipleOf``, a bound that is
    not a number, or a keyword the regex writes from first)."""
    if not isinstance(sub, dict) or sub.get("type") != "integer" or "multipleOf" in sub:
        return None
    if not any(key in sub for key in BOUNDS) or any(key in sub for key in _WRITTEN_FIRST):
        return None
    values = [sub[key] for key in BOUNDS if key in sub]
    if any(isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(v) for v in values):
        return None
    lows = [math.ceil(sub["minimum"])] if "minimum" in sub else []
    lows += [math.floor(sub["exclusiveMinimum"]) + 1] if "exclusiveMinimum" in sub else []
    highs = [math.floor(sub["maximum"])] if "maximum" in sub else []
    highs += [math.ceil(sub["exclusiveMaximum"]) - 1] if "exclusiveMaximum" in sub else []
    return (max(lows) if lows else None), (min(highs) if highs else None)


def integer_range_regex(low: int | None, high: int | None) -> str:
    """A regex of exactly the canonical decimal integers in [low, high] (None: unbounded)."""
    if low is not None and high is not None and low > high:
        raise ValueError(f"no integer lies in [{low}, {high}]")
    parts = []
    if low is None or low < 0:  # negatives -x, x in [max(1, -high), -low]
        top = None if low is None else -low
        bottom = 1 if high is None or high >= 0 else -high
        parts.append(f"-(?:{_naturals(bottom, top)})")
    if high is None or high >= 0:
        parts.append(_naturals(max(low, 0) if low is not None else 0, high))
    return "|".join(parts)


def check_integer_ranges(schema: dict) -> None:
    """Refuse bounds that leave no integer, naming where."""
    for sub, where in subschemas(schema):
        bounds = integer_bounds(sub)
        if bounds is not None and None not in bounds and bounds[0] > bounds[1]:
            raise ValueError(f"json_schema's integer bounds at {where} leave no integer ({bounds[0]} > {bounds[1]}); "
                             "widen them")


def with_integer_ranges(schema: dict) -> tuple[dict, dict[str, str]]:
    """A copy of ``schema`` whose bounded integer subschemas are string placeholders, and
    {'"placeholder"': the range's regex} to put back into the schema's regex."""
    schema = copy.deepcopy(schema)
    holes: dict[str, str] = {}
    for sub, _ in subschemas(schema):
        bounds = integer_bounds(sub)
        if bounds is None:
            continue
        name = _PLACEHOLDER.format(len(holes))
        holes[f'"{name}"'] = f"(?:{integer_range_regex(*bounds)})"
        for key in [key for key in sub if key not in ("title", "description", "$defs", "definitions")]:
            del sub[key]
        sub["const"] = name
    return schema, holes


def fill_holes(regex: str, holes: dict[str, str]) -> str:
    """``regex`` with each placeholder (a const of letters, written verbatim as a quoted literal)
    replaced by its range; a placeholder in a ``$defs`` entry nothing refers to is not written."""
    for placeholder, pattern in holes.items():
        regex = regex.replace(placeholder, pattern)
    return regex


def _naturals(low: int, high: int | None) -> str:
    """Integers in [low, high] (0 <= low; high None: unbounded) by digit count."""
    parts = []
    last = len(str(low)) if high is None else len(str(high))
    for digits in range(len(str(low)), last + 1):
        lo = max(low, 10 ** (digits - 1) if digits > 1 else 0)
        hi = 10 ** digits - 1 if high is None else min(high, 10 ** digits - 1)
        if lo <= hi:
            parts.append(_same_length(str(lo), str(hi)))
    if high is None:
        parts.append(f"[1-9][0-9]{{{last},}}")  # every integer of more digits
    return "|".join(parts)


def _same_length(lo: str, hi: str) -> str:
    """Digit strings of one length from ``lo`` to ``hi`` (lo <= hi), digit by digit."""
    if lo == hi:
        return lo
    if len(lo) == 1:
        return f"[{lo}-{hi}]"
    rest = len(lo) - 1
    if lo == "0" * len(lo) and hi == "9" * len(hi):
        return f"[0-9]{{{len(lo)}}}"
    if lo[0] == hi[0]:
        return f"{lo[0]}(?:{_same_length(lo[1:], hi[1:])})"
    parts = [f"{lo[0]}(?:{_same_length(lo[1:], '9' * rest)})"]
    if int(hi[0]) - int(lo[0]) > 1:
        parts.append(f"[{int(lo[0]) + 1}-{int(hi[0]) - 1}][0-9]{{{rest}}}")
    parts.append(f"{hi[0]}(?:{_same_length('0' * rest, hi[1:])})")
    return "(?:" + "|".join(parts) + ")"
