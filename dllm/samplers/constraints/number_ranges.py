"""Number bounds (``minimum`` / ``maximum`` / ``exclusiveMinimum`` / ``exclusiveMaximum`` on
``{"type": "number"}``) as an exact regex of decimals in that range.

outlines-core 0.2.14 ignores number bounds, so pydantic's ``Field(ge=0.0, le=1.0)`` could answer
-3.5. A bounded number is written as a decimal without an exponent: an integer part, then at most
``MAX_FRACTION_DIGITS`` fraction digits (``0.75``, ``12``, ``-0.5``; no ``-0``), and with a
fraction at most ``SIGNIFICANT_DIGITS`` digits in all, so a reader that turns it into a double
keeps its order against the bound (any decimal of 15 significant digits is a distinct double):
every answer validates under jsonschema's float comparison too. For each count of fraction digits
``k`` the answers are the integers ``N = value * 10**k`` in a range, written with the point ``k``
digits from the right. Bounds compare as the decimals JSON writes them (``0.1`` is 1/10).
"""
from __future__ import annotations

import math
from decimal import Decimal
from numbers import Real
from typing import Any

BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
# keywords the schema -> regex writes a subschema from before its type: bounds beside them are not read
WRITTEN_FIRST = ("properties", "allOf", "anyOf", "prefixItems", "enum", "const", "$ref")
MAX_FRACTION_DIGITS = 6
SIGNIFICANT_DIGITS = 15
Bound = tuple[Decimal, bool]  # (value, strict)


def bounded_type(sub: Any, kind: str) -> bool:
    """``sub`` is ``{"type": kind, ...}`` with a finite numeric bound that the range regex writes
    (no ``multipleOf``, no keyword the schema -> regex reads first)."""
    if not isinstance(sub, dict) or sub.get("type") != kind or "multipleOf" in sub:
        return False
    if not any(key in sub for key in BOUNDS) or any(key in sub for key in WRITTEN_FIRST):
        return False
    values = [sub[key] for key in BOUNDS if key in sub]
    return all(isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v) for v in values)


def number_bounds(sub: Any) -> tuple[Bound | None, Bound | None] | None:
    """(lower, upper) bound of a bounded ``{"type": "number"}`` subschema, each (value, strict) or
    None (open); None when ``sub`` is not one (see ``bounded_type``)."""
    if not bounded_type(sub, "number"):
        return None
    lows = [(Decimal(str(sub[key])), key.startswith("exclusive")) for key in ("minimum", "exclusiveMinimum")
            if key in sub]
    highs = [(Decimal(str(sub[key])), key.startswith("exclusive")) for key in ("maximum", "exclusiveMaximum")
             if key in sub]
    low = max(lows, key=lambda b: (b[0], b[1])) if lows else None  # the tighter; strict when equal
    high = min(highs, key=lambda b: (b[0], not b[1])) if highs else None
    return low, high


def empty_range(low: Bound | None, high: Bound | None) -> bool:
    """No number lies between the bounds."""
    if low is None or high is None:
        return False
    return low[0] > high[0] or (low[0] == high[0] and (low[1] or high[1]))


def number_range_regex(low: Bound | None, high: Bound | None) -> str:
    """A regex of exactly the decimals this module writes (see its docstring) within the bounds."""
    interval = (("(" if low[1] else "[") + str(low[0]) if low else "(-inf") + ", " + \
        (str(high[0]) + (")" if high[1] else "]") if high else "inf)")
    if empty_range(low, high):
        raise ValueError(f"no number lies in {interval}")
    parts = []
    if low is None or low[0] < 0:  # negatives: magnitudes m = -value > 0
        m_low = (-high[0], high[1]) if high is not None and high[0] < 0 else (Decimal(0), True)
        m_high = None if low is None else (-low[0], low[1])
        negatives = _magnitudes(m_low, m_high)
        if negatives:
            parts.append(f"-(?:{negatives})")
    if high is None or high[0] >= 0:
        positives = _magnitudes(low if low is not None and low[0] >= 0 else (Decimal(0), False), high)
        if positives:
            parts.append(positives)
    if not parts:  # e.g. (-1e-9, 1e-9) exclusive: only numbers of more fraction digits than written
        raise ValueError(f"no decimal of at most {MAX_FRACTION_DIGITS} fraction digits lies in {interval}")
    return "|".join(parts)


def _magnitudes(low: Bound, high: Bound | None) -> str:
    """Non-negative decimals in the range (``low`` >= 0), one alternative per fraction length."""
    alternatives = []
    for k in range(MAX_FRACTION_DIGITS + 1):
        scale = 10 ** k
        scaled = low[0] * scale
        n_low = math.floor(scaled) + 1 if low[1] else math.ceil(scaled)
        n_high = None
        if high is not None:
            scaled = high[0] * scale
            n_high = math.ceil(scaled) - 1 if high[1] else math.floor(scaled)
        if k:  # a fraction: at most SIGNIFICANT_DIGITS digits in all
            cap = 10 ** SIGNIFICANT_DIGITS - 1
            n_high = cap if n_high is None else min(n_high, cap)
        if n_high is not None and n_low > n_high:
            continue
        alternatives.append(naturals(n_low, n_high) if k == 0 else _pointed(n_low, n_high, k))
    return "|".join(alternatives)


def _pointed(n_low: int, n_high: int, k: int) -> str:
    """Integers in [n_low, n_high] written with a point ``k`` digits from the right (``0.05`` for
    5 with k = 2)."""
    i_low, f_low = divmod(n_low, 10 ** k)
    i_high, f_high = divmod(n_high, 10 ** k)

    def fraction(a: int, b: int) -> str:
        return same_length(str(a).zfill(k), str(b).zfill(k))

    if i_low == i_high:
        return f"{i_low}\\.(?:{fraction(f_low, f_high)})"
    parts = [f"{i_low}\\.(?:{fraction(f_low, 10 ** k - 1)})"]
    if i_high - i_low > 1:
        parts.append(f"(?:{naturals(i_low + 1, i_high - 1)})\\.[0-9]{{{k}}}")
    parts.append(f"{i_high}\\.(?:{fraction(0, f_high)})")
    return "(?:" + "|".join(parts) + ")"


def naturals(low: int, high: int | None) -> str:
    """Canonical integers (no leading zeros) in [low, high] (0 <= low; high None: unbounded),
    by digit count."""
    parts = []
    last = len(str(low)) if high is None else len(str(high))
    for digits in range(len(str(low)), last + 1):
        lo = max(low, 10 ** (digits - 1) if digits > 1 else 0)
        hi = 10 ** digits - 1 if high is None else min(high, 10 ** digits - 1)
        if lo <= hi:
            parts.append(same_length(str(lo), str(hi)))
    if high is None:
        parts.append(f"[1-9][0-9]{{{last},}}")  # every integer of more digits
    return "|".join(parts)


def same_length(lo: str, hi: str) -> str:
    """Digit strings of one length from ``lo`` to ``hi`` (lo <= hi), digit by digit."""
    if lo == hi:
        return lo
    if len(lo) == 1:
        return f"[{lo}-{hi}]"
    rest = len(lo) - 1
    if lo == "0" * len(lo) and hi == "9" * len(hi):
        return f"[0-9]{{{len(lo)}}}"
    if lo[0] == hi[0]:
        return f"{lo[0]}(?:{same_length(lo[1:], hi[1:])})"
    parts = [f"{lo[0]}(?:{same_length(lo[1:], '9' * rest)})"]
    if int(hi[0]) - int(lo[0]) > 1:
        parts.append(f"[{int(lo[0]) + 1}-{int(hi[0]) - 1}][0-9]{{{rest}}}")
    parts.append(f"{hi[0]}(?:{same_length('0' * rest, hi[1:])})")
    return "(?:" + "|".join(parts) + ")"
