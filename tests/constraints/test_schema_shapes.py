"""Schemas whose regex outlines-core writes wrongly are refused by place before any model work,
and the schemas it writes rightly (pydantic's output among them) still pass: every word of the
regex a schema compiles to parses and validates (json and jsonschema decide, over random walks of
the regex's automaton)."""
from __future__ import annotations

import json
import random
from typing import Literal, Optional

import jsonschema
import pytest
from pydantic import BaseModel, Field

from dllm.samplers.constraints import ConstraintSpec
from dllm.samplers.constraints.lexer import live_states


def regex_words(regex: str, count: int = 200, seed: int = 0) -> list[str]:
    """``count`` random words of ``regex``: walks of its DFA through states that can still accept."""
    import interegular
    from interegular.fsm import anything_else

    fsm = interegular.parse_pattern(regex).to_fsm()
    chars: dict = {}
    for char, symbol in fsm.alphabet._symbol_mapping.items():
        chars.setdefault(symbol, []).append("\u00e9" if char is anything_else else char)
    live = live_states(fsm)
    rng, words = random.Random(seed), []
    for _ in range(count):
        state, word = fsm.initial, []
        while not (state in fsm.finals and (rng.random() < 0.2 or len(word) > 120)):
            moves = [(s, t) for s, t in fsm.map.get(state, {}).items() if t in live]
            if not moves:  # an accepting state with no way on
                break
            symbol, state = rng.choice(moves)
            word.append(rng.choice(chars[symbol]))
        words.append("".join(word))
    return words


def invalid_words(schema: dict, checker=None) -> list[tuple[str, str]]:
    """(word, why) for the regex's words that are not JSON instances of ``schema``."""
    validator = jsonschema.validators.validator_for(schema)(schema, format_checker=checker)
    bad = []
    for word in regex_words(ConstraintSpec.parse(json_schema=schema).to_regex()):
        try:
            error = jsonschema.exceptions.best_match(validator.iter_errors(json.loads(word)))
        except json.JSONDecodeError as err:
            bad.append((word, f"not JSON: {err}"))
            continue
        if error is not None:
            bad.append((word, error.message))
    return bad


INT, STR = {"type": "integer"}, {"type": "string"}


@pytest.mark.parametrize("schema, words", [
    ({"type": "object", "properties": {"a": INT}, "required": ["a"], "anyOf": [{"required": ["a"]}]},
     r"'anyOf' beside 'properties' at /"),
    ({"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 4}},
     r"'pattern' and 'maxLength' on one string at /items"),
    ({"type": "string", "format": "uuid", "minLength": 36}, r"'format' and 'minLength' on one string"),
    ({"type": "string", "pattern": '^say "hi"$'}, r"'pattern' at / .*matches '\"'"),
    ({"type": "string", "pattern": r"^a\\b$"}, r"'pattern' at / .*matches '\\\\'"),
    ({"type": "string", "pattern": "^.{2}$"}, r"matches '\"'"),
    ({"type": "object", "properties": {"a": INT}, "required": ["a", "b"]}, r"requires 'b' at /"),
    ({"type": "object", "required": ["a"]}, r"requires 'a' at /"),
    ({"type": "object", "properties": {'a"b': INT}, "required": ['a"b']}, r"property name 'a\"b' at /"),
    ({"type": "string", "enum": ["ok", 1]}, r"lists 1 in 'enum' at /, .*'type'"),
    ({"type": "string", "maxLength": 2, "const": "long"}, r"lists 'long' in 'const'"),
    ({"type": "array", "prefixItems": [INT], "minItems": 2}, r"'prefixItems' of 1 at /"),
    ({"type": "object", "properties": {"a": INT}, "minProperties": 1}, r"'minProperties' at /"),
    ({"type": "object", "properties": {"a": INT, "b": INT}, "dependentRequired": {"a": ["b"]}},
     r"'dependentRequired' at /"),
])
def test_shapes_written_wrongly_are_refused_by_place(schema, words):
    with pytest.raises(ValueError, match=words):
        ConstraintSpec.parse(json_schema=schema)


class Address(BaseModel):
    city: str = Field(description="the city", max_length=12)
    zip: Optional[str] = Field(default=None, pattern=r"^[0-9]{5}$")


class Person(BaseModel):
    name: str = Field(min_length=1, max_length=8)
    kind: Literal["a", "b"]
    address: Address = Field(description="where")
    previous: list[Address] = Field(default_factory=list, max_length=2)
    nick: Optional[str] = None
    pair: tuple[int, bool]


@pytest.mark.parametrize("schema", [
    Person.model_json_schema(),
    {"type": "string", "pattern": "^[A-Z]{2}-[0-9]+$"},
    {"type": "string", "enum": ["say \"hi\"", "a\\b"]},
    {"allOf": [{"type": "integer"}], "description": "one schema"},
    {"type": ["string", "null"], "maxLength": 3},
], ids=["pydantic", "pattern", "enum", "allOf-one", "type-list"])
def test_accepted_schemas_only_write_instances(schema):
    assert invalid_words(schema) == []


def test_refused_shapes_did_write_non_instances():
    """What is refused is what the regex gets wrong: the same schemas' regexes, built without the
    check, write answers that break them."""
    from outlines_core.json_schema import build_regex_from_schema

    for schema in ({"type": "string", "pattern": '^a"b$'},
                   {"type": "object", "properties": {"a": INT}, "required": ["a", "b"]},
                   {"type": "string", "enum": ["ok", 1]}):
        regex = build_regex_from_schema(json.dumps(schema))
        validator = jsonschema.validators.validator_for(schema)(schema)

        def valid(word):
            try:
                return validator.is_valid(json.loads(word))
            except json.JSONDecodeError:
                return False
        assert not all(valid(word) for word in regex_words(regex, 50))
