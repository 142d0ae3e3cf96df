"""Number bounds in a JSON schema (pydantic's ge / gt / le / lt on a float) are enforced: the range
regex accepts exactly the decimals it writes (no exponent, at most 6 fraction digits and 15
digits in all with a fraction, no -0) whose exact value lies in the range, checked against Decimal
comparisons on strings near every bound; what it accepts validates under jsonschema's float
comparison; a tiny random model's answers validate; ranges with no number written are refused."""
from __future__ import annotations

import json
import random
import re
from decimal import Decimal

import jsonschema
import pytest

from dllm.samplers.constraints import ConstraintSpec
from dllm.samplers.constraints.number_ranges import number_bounds, number_range_regex

DECIMAL = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")


def _written(text: str) -> bool:
    """The form the module writes, decided on the string alone."""
    if not DECIMAL.fullmatch(text) or text.startswith("-") and Decimal(text) == 0:
        return False
    whole, _, fraction = text.lstrip("-").partition(".")
    return len(fraction) <= 6 and (not fraction or len(whole.lstrip("0")) + len(fraction) <= 15)


def _inside(value: Decimal, schema: dict) -> bool:
    return (("minimum" not in schema or value >= Decimal(str(schema["minimum"])))
            and ("maximum" not in schema or value <= Decimal(str(schema["maximum"])))
            and ("exclusiveMinimum" not in schema or value > Decimal(str(schema["exclusiveMinimum"])))
            and ("exclusiveMaximum" not in schema or value < Decimal(str(schema["exclusiveMaximum"]))))


def _schemas() -> list[dict]:
    rng = random.Random(0)
    schemas = [{"minimum": 0, "maximum": 1}, {"exclusiveMinimum": 0}, {"maximum": 0}, {"exclusiveMaximum": 0},
               {"minimum": -2.5, "exclusiveMaximum": 3.25}, {"minimum": 0.1, "maximum": 0.3},
               {"exclusiveMinimum": 0.15, "exclusiveMaximum": 0.16}, {"minimum": 7, "maximum": 7},
               {"minimum": -1, "maximum": 1, "exclusiveMinimum": -1}, {"minimum": 99.99, "maximum": 100.5},
               {"exclusiveMinimum": -0.001, "exclusiveMaximum": 0.001}, {"minimum": 1e-6, "maximum": 2e-6},
               {"exclusiveMaximum": -12.125}, {"minimum": 123456.5}]
    for _ in range(30):
        a, b = sorted(round(rng.uniform(-60, 60), rng.randint(0, 3)) for _ in range(2))
        low, high = rng.choice(["minimum", "exclusiveMinimum", None]), rng.choice(["maximum", "exclusiveMaximum", None])
        schema = {key: value for key, value in ((low, a), (high, b)) if key}
        if schema and not (a == b and ("exclusiveMinimum" in schema or "exclusiveMaximum" in schema)):
            schemas.append(schema)
    return schemas


def _candidates(bounds: dict) -> set[str]:
    """Strings near each bound (a step of 10^-k either side, several fraction lengths, trailing zeros),
    around zero, far out, and malformed ones."""
    out = {"0", "-0", "0.0", "-0.0", "00", "01.5", "1.", ".5", "1e2", "+1", "-", "", "1.0000000", "12345678901234567",
           "-12345678901234567", "1234567890.123456", "123456789012.123"}
    for value in bounds.values():
        base = Decimal(str(value))
        for k in range(0, 8):
            for j in (-2, -1, 0, 1, 2):
                v = base + j * Decimal(10) ** -k
                for digits in range(0, 8):
                    out.add(f"{v:.{digits}f}")
    return out


@pytest.mark.parametrize("bounds", _schemas(), ids=lambda s: json.dumps(s, separators=(",", ":")))
def test_the_range_regex_is_exactly_the_written_decimals_in_range(bounds):
    schema = {"type": "number", **bounds}
    pattern = re.compile(number_range_regex(*number_bounds(schema)))
    floats = jsonschema.Draft202012Validator(schema)
    for text in sorted(_candidates(bounds)):
        expected = _written(text) and _inside(Decimal(text), schema)
        assert bool(pattern.fullmatch(text)) == expected, text
        if expected:
            assert floats.is_valid(json.loads(text)), text


def test_number_bounds_hold_in_a_models_answers(tiny_models):
    schema = {"type": "object", "required": ["score", "t"], "additionalProperties": False,
              "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1},   # Field(ge=0, le=1)
                             "t": {"type": "number", "exclusiveMinimum": -2.5, "exclusiveMaximum": 0.5}}}
    lm = tiny_models["llada"]
    for options in (dict(), dict(temperature=1.0, seed=3)):
        out = lm.generate(["hi", "a longer prompt"], chat=False, max_tokens=48, json_schema=schema, **options)
        for text in out.texts:
            jsonschema.validate(json.loads(text), schema)


@pytest.mark.parametrize("schema, words", [
    ({"type": "number", "minimum": 2, "maximum": 1}, "bounds at /: no number lies in [2, 1]"),
    ({"type": "object", "properties": {"p": {"type": "number", "exclusiveMinimum": 1, "maximum": 1}}},
     "bounds at /properties/p: no number lies in (1, 1]"),
    ({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1e-7},
     "no decimal of at most 6 fraction digits lies in (0, 1E-7)"),
    ({"type": "number", "minimum": 0, "multipleOf": 0.5}, "'minimum' at /"),
])
def test_number_ranges_it_cannot_write_are_refused(schema, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        ConstraintSpec.parse(json_schema=schema)
