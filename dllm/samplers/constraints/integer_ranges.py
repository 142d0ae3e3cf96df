"""Integer bounds (``minimum`` / ``maximum`` / ``exclusiveMinimum`` / ``exclusiveMaximum``) as an
exact regex of the integers JSON writes in that range, and the swap that puts every bounded
integer or number (number_ranges.py) into a schema's regex.

outlines-core 0.2.14 writes every integer as ``-?(0|[1-9][0-9]*)`` and ignores its bounds, so
pydantic's ``Field(ge=0, le=120)`` could answer -5. A bounded integer or number subschema is
swapped for a string ``const`` placeholder before the schema -> regex step, and the placeholder
(quotes included) is replaced in the regex by the range's own pattern: canonical integers (no
leading zeros, no ``-0``) from the lower bound to the upper, either side open. ``multipleOf`` and
bounds beside another keyword the regex writes from stay refused (schema_support.py).
"""
from __future__ import annotations

import copy
import math
from typing import Any

from dllm.samplers.constraints.number_ranges import BOUNDS, bounded_type, naturals, number_bounds, number_range_regex
from dllm.samplers.constraints.schema_walk import subschemas

_PLACEHOLDER = "dllmintrange{}x"  # letters only: written verbatim in the regex, never a real answer


def integer_bounds(sub: Any) -> tuple[int | None, int | None] | None:
    """(lowest, highest) integer a ``{"type": "integer", ...bounds}`` subschema allows (None: open);
    None when ``sub`` is not such a subschema (no bound, another type, ``multipleOf``, a bound that is
    not a number, or a keyword the regex writes from first)."""
    if not bounded_type(sub, "integer"):
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
        parts.append(f"-(?:{naturals(bottom, top)})")
    if high is None or high >= 0:
        parts.append(naturals(max(low, 0) if low is not None else 0, high))
    return "|".join(parts)


def bounded(sub: Any) -> bool:
    """``sub`` is an integer or number whose bounds the range regex writes."""
    return integer_bounds(sub) is not None or number_bounds(sub) is not None


def range_pattern(sub: Any) -> str | None:
    """The regex of a bounded integer or number subschema's values (None: not one)."""
    bounds = integer_bounds(sub)
    if bounds is not None:
        return integer_range_regex(*bounds)
    bounds = number_bounds(sub)
    return None if bounds is None else number_range_regex(*bounds)


def check_integer_ranges(schema: dict, places: dict[int, str] | None = None) -> None:
    """Refuse bounds that leave no integer (or no number written), naming where."""
    for sub, where in subschemas(schema, places=places):
        bounds = integer_bounds(sub)
        if bounds is not None and None not in bounds and bounds[0] > bounds[1]:
            raise ValueError(f"json_schema's integer bounds at {where} leave no integer ({bounds[0]} > {bounds[1]}); "
                             "widen them")
        numbers = number_bounds(sub)
        if numbers is not None:
            try:
                number_range_regex(*numbers)
            except ValueError as err:
                raise ValueError(f"json_schema's number bounds at {where}: {err}; widen them") from None


def with_integer_ranges(schema: dict) -> tuple[dict, dict[str, str]]:
    """A copy of ``schema`` whose bounded integer and number subschemas are string placeholders,
    and {'"placeholder"': the range's regex} to put back into the schema's regex."""
    schema = copy.deepcopy(schema)
    holes: dict[str, str] = {}
    for sub, _ in subschemas(schema):
        pattern = range_pattern(sub)
        if pattern is None:
            continue
        name = _PLACEHOLDER.format(len(holes))
        holes[f'"{name}"'] = f"(?:{pattern})"
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
