"""Random schemas against the JSON-schema constraint: each is refused with the keyword's place
and a fix, or every random word of its regex is JSON that validates (jsonschema, formats checked),
and random valid instances, written as a model writes them (json.dumps: properties in the schema's
order, ", " and ": " or no spaces at all, non-ASCII characters as they are), are words of it."""
from __future__ import annotations

import json
import re

import jsonschema
import pytest

from dllm.samplers.constraints import ConstraintSpec
from tests.constraints.random_schemas import RandomInstance, RandomSchema, format_checker
from tests.constraints.test_schema_shapes import regex_words

SEEDS = (*range(1, 25), 45, 46, 48, 61, 83)  # refused and accepted, formats, a recursive $ref; each quick
# RandomSchema(seed, edges=True): allOf merged and refused, a $ref with a bound beside it, false as
# items and property, a nullable array, a $ref to nothing; each quick
EDGE_SEEDS = (3, 7, 9, 10, 12, 13, 30, 34, 35, 58, 93)


def _outcome(schema: dict) -> str | None:
    """The schema's regex, or None when refused (the refusal checked)."""
    try:
        spec = ConstraintSpec.parse(json_schema=schema)
    except ValueError as err:
        assert re.search(r" at /\S*", str(err)) and ";" in str(err), str(err)  # where, then the fix
        return None
    return spec.to_regex()


@pytest.mark.parametrize("seed, edges", [*((seed, False) for seed in SEEDS), *((seed, True) for seed in EDGE_SEEDS)])
def test_random_schema_is_refused_or_sound_and_complete(seed, edges):
    schema = RandomSchema(seed, edges=edges).top()
    regex = _outcome(schema)
    if regex is None:
        return
    validator = jsonschema.validators.validator_for(schema)(schema, format_checker=format_checker())
    for word in regex_words(regex, count=30, seed=seed):
        error = jsonschema.exceptions.best_match(validator.iter_errors(json.loads(word)))
        assert error is None, (word, error.message, schema)
    written = re.compile(regex)
    for i in range(8):
        value = RandomInstance(schema, seed * 100 + i).value(schema)
        if not validator.is_valid(value):
            continue  # the generator's best effort missed: not an instance
        for separators in ((", ", ": "), (",", ":")):
            text = json.dumps(value, ensure_ascii=False, separators=separators)
            assert written.fullmatch(text), (text, schema)


def test_the_seeds_cover_both_outcomes():
    """The fixed seeds hold refused and accepted schemas, a recursive $ref and a format."""
    schemas = [RandomSchema(seed).top() for seed in SEEDS]
    outcomes = [_outcome(schema) is None for schema in schemas]
    assert 0 < sum(outcomes) < len(outcomes) / 2
    texts = [json.dumps(schema) for schema in schemas]
    assert any('"kids"' in text for text in texts) and any('"format"' in text for text in texts)


def test_the_edge_seeds_cover_the_rewritten_shapes():
    """The edge seeds hold a merged allOf, a refused one, a $ref with a keyword beside it, false as
    items and as a property, a type list with null and a $ref to nothing."""
    schemas = {seed: RandomSchema(seed, edges=True).top() for seed in EDGE_SEEDS}
    texts = {seed: json.dumps(schema) for seed, schema in schemas.items()}
    accepted = {seed for seed, schema in schemas.items() if _outcome(schema) is not None}
    assert any('"allOf"' in texts[seed] for seed in accepted) and any('"allOf"' in texts[seed] for seed in
                                                                        set(EDGE_SEEDS) - accepted)
    assert any('"see there", "maximum"' in texts[seed] for seed in accepted)
    assert any('"items": false' in texts[seed] for seed in accepted) and any('"null"]' in texts[seed] for seed in accepted)
    assert any(': false, "' in texts[seed] or ': false}' in texts[seed] for seed in accepted)
    assert any("#/$defs/missing" in text for text in texts.values())


def test_a_pretty_printed_instance_is_not_a_word():
    """The regex takes at most one space between tokens (outlines-core's whitespace), so an answer
    is written on one line: json.dumps(..., indent=2) of an instance is not a word of it."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    regex = re.compile(ConstraintSpec.parse(json_schema=schema).to_regex())
    assert regex.fullmatch('{"a": 1}') and regex.fullmatch('{ "a" : 1 }')
    assert not regex.fullmatch(json.dumps({"a": 1}, indent=2))


@pytest.mark.parametrize("anything", [{}, True, {"description": "any value"}])
def test_a_property_of_any_value_keeps_the_object(anything):
    """pydantic's ``Any`` ({} or an annotation alone) and ``true`` as a property, prefix item or
    item: outlines-core wrote {} there as an ungrouped alternation (a bare number was a word of
    the object) and failed on ``true`` and on an annotation alone."""
    def regex(schema: dict) -> re.Pattern:
        return re.compile(ConstraintSpec.parse(json_schema=schema).to_regex())

    integer = {"type": "integer"}
    pair = regex({"type": "object", "properties": {"a": anything, "b": integer}, "required": ["a", "b"]})
    assert pair.fullmatch('{"a": [1, {"c": null}], "b": 2}') and pair.fullmatch('{"a": "x", "b": 2}')
    assert not any(pair.fullmatch(text) for text in ("1", "null", '"a"', '[1, 2]', '{"a": 1}', '{"a": 1, "b": "x"}'))
    prefix = regex({"type": "array", "prefixItems": [anything, integer]})
    assert prefix.fullmatch('[{"c": true}, 3]') and not any(prefix.fullmatch(text) for text in ("0.5", "[1, 2.5]"))
    items = regex({"type": "array", "items": anything})
    assert items.fullmatch('[1, "x", null, []]') and not items.fullmatch("1")


@pytest.mark.parametrize("schema, words", [
    ({"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 1}, r"'minItems' 3 over 'maxItems' 1 at /"),
    ({"type": "object", "properties": {"s": {"type": "string", "minLength": 5, "maxLength": 2}}},
     r"'minLength' 5 over 'maxLength' 2 at /properties/s"),
])
def test_bounds_no_value_meets_are_refused_by_place(schema, words):
    with pytest.raises(ValueError, match=words + ".*widen them"):
        ConstraintSpec.parse(json_schema=schema)
