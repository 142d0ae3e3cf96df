"""A ConstraintSpec's language, read without a model: ``choice`` allows exactly its strings
(regex characters in them are literal), and ``json_answer_errors`` says why a text is not an
instance of a schema, the schema's own violations included, not only text that is no JSON."""
from __future__ import annotations

import re

import pytest

from dllm.samplers.constraints import ConstraintSpec, json_answer_errors


def test_a_choice_is_its_strings_exactly():
    choices = ["a.b", "1+1", "(x)", "yes|no", "c*"]
    pattern = ConstraintSpec.parse(choice=choices).to_regex()
    for text in choices:
        assert re.fullmatch(pattern, text), text
    for text in ("axb", "11", "x", "yes", "no", "ccc", ""):  # what the strings would match as regexes
        assert not re.fullmatch(pattern, text), text


def test_json_answer_errors_names_a_schema_violation():
    pytest.importorskip("jsonschema")
    person = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    assert json_answer_errors('{"name": "Ada"}', person) is None
    assert "is not of type 'string'" in json_answer_errors('{"name": 3}', person)
    assert "'name' is a required property" in json_answer_errors("{}", person)
    assert json_answer_errors("Ada", person).startswith("not JSON")


@pytest.mark.parametrize("regex", [r"^\d{3}-\d{4}$", r"^\d{3}-\d{4}", r"\d{3}-\d{4}$"])
def test_anchors_around_a_regex_mean_the_whole_answer(regex):
    """vLLM users anchor their guided_regex; a constraint matches the whole answer anyway."""
    pattern = ConstraintSpec.parse(regex=regex).to_regex()
    assert re.fullmatch(pattern, "555-1234") and not re.fullmatch(pattern, "555-12345")


def test_a_literal_dollar_at_the_end_stays():
    pattern = ConstraintSpec.parse(regex=r"\d+\$").to_regex()
    assert re.fullmatch(pattern, "12$") and not re.fullmatch(pattern, "12")


def test_a_schema_pattern_anchored_at_one_end_compiles():
    pytest.importorskip("outlines_core")
    from dllm.samplers.constraints.token_dfa import _interegular

    for pattern in ("^[A-Z]{2}", "[A-Z]{2}$"):
        regex = ConstraintSpec.parse(json_schema={"type": "string", "pattern": pattern}).to_regex()
        _interegular().parse_pattern(regex)  # the regex the constraint compiles parses
        assert re.fullmatch(regex, '"AB"') and not re.fullmatch(regex, '"ab"')
