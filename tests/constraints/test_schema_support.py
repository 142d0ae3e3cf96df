"""Schema keywords the regex would ignore are refused by name and place; a property that merely
has such a keyword's name is not one; without outlines-core the error names the extra to install."""
from __future__ import annotations

import sys

import pytest

from dllm.samplers.constraints import ConstraintSpec
from dllm.samplers.constraints.schema_support import unenforced_keywords


def test_keywords_are_found_in_subschemas_only():
    schema = {"type": "object", "properties": {"minimum": {"type": "integer"},
                                               "tags": {"type": "array", "items": {"uniqueItems": True}}},
              "$defs": {"n": {"anyOf": [{"type": "number", "maximum": 3, "multipleOf": 0.5}]}}}
    assert unenforced_keywords(schema) == [("uniqueItems", "/properties/tags/items"),
                                           ("maximum", "/$defs/n/anyOf/0"), ("multipleOf", "/$defs/n/anyOf/0")]
    assert unenforced_keywords({"type": "object", "properties": {"minimum": {"type": "integer"}}}) == []
    assert unenforced_keywords({"type": "integer", "maximum": 3}) == []  # an exact range (integer_ranges.py)
    assert unenforced_keywords({"type": "number", "maximum": 3}) == []  # and a number's (number_ranges.py)
    assert unenforced_keywords({"type": "integer", "maximum": 3, "multipleOf": 2}) == [("maximum", "/"),
                                                                                      ("multipleOf", "/")]


def test_the_api_refuses_them_before_any_model_work():
    with pytest.raises(ValueError, match=r"'exclusiveMaximum' at /items.*drop the bound"):
        ConstraintSpec.parse(json_schema={"type": "array", "items": {"type": "number", "exclusiveMaximum": 1,
                                                                      "enum": [0, 0.5]}})
    assert ConstraintSpec.parse(json_schema={"type": "integer", "enum": [1, 2]}) is not None


def test_a_missing_schema_library_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "outlines_core.json_schema", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'dllm\[structured\]'"):
        ConstraintSpec.parse(json_schema={"type": "boolean"}).to_regex()
