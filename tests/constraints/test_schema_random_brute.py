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


def _outcome(schema: dict) -> str | None:
    """The schema's regex, or None when refused (the refusal checked)."""
    try:
        spec = ConstraintSpec.parse(json_schema=schema)
    except ValueError as err:
        assert re.search(r" at /\S*", str(err)) and ";" in str(err), str(err)  # where, then the fix
        return None
    return spec.to_regex()


@pytest.mark.parametrize("seed", SEEDS)
def test_random_schema_is_refused_or_sound_and_complete(seed):
    schema = RandomSchema(seed).top()
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


def test_a_pretty_printed_instance_is_not_a_word():
    """The regex takes at most one space between tokens (outlines-core's whitespace), so an answer
    is written on one line: json.dumps(..., indent=2) of an instance is not a word of it."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    regex = re.compile(ConstraintSpec.parse(json_schema=schema).to_regex())
    assert regex.fullmatch('{"a": 1}') and regex.fullmatch('{ "a" : 1 }')
    assert not regex.fullmatch(json.dumps({"a": 1}, indent=2))
