"""String formats compile to regexes whose every word is a JSON string of the format (json,
jsonschema's date check, Python's datetime and urllib decide): outlines-core's own regexes let
raw quotes, backslashes and control characters into the string (time, email, uri) and take days
no month has (date)."""
from __future__ import annotations

import datetime
import json
import re
from urllib.parse import urlsplit

import jsonschema
import pytest

from dllm.samplers.constraints import ConstraintSpec
from test_schema_shapes import invalid_words, regex_words


def _words(schema: dict) -> list[str]:
    return [json.loads(word) for word in regex_words(ConstraintSpec.parse(json_schema=schema).to_regex(), 300)]


def _regex(fmt: str) -> re.Pattern:
    return re.compile(ConstraintSpec.parse(json_schema={"type": "string", "format": fmt}).to_regex())


@pytest.mark.parametrize("fmt", ["date", "time", "date-time", "email", "uri", "uuid"])
def test_every_word_is_a_json_string(fmt):
    assert invalid_words({"type": "string", "format": fmt}, jsonschema.FormatChecker(["date", "email", "uuid"])) == []


def test_dates_are_calendar_dates():
    for text in _words({"type": "string", "format": "date"}):
        datetime.date.fromisoformat(text)
    date = _regex("date")
    assert all(date.fullmatch(f'"{day}"') for day in ("2020-02-29", "2000-02-29", "0004-02-29", "2019-12-31"))
    assert not any(date.fullmatch(f'"{day}"') for day in ("2019-02-29", "1900-02-29", "2019-04-31", "0000-01-01"))


def test_times_are_rfc3339_times_with_their_offset():
    for text in _words({"type": "string", "format": "time"}):
        assert datetime.time.fromisoformat(text).tzinfo is not None, text
    for text in _words({"type": "string", "format": "date-time"}):
        assert datetime.datetime.fromisoformat(text).tzinfo is not None, text


def test_uris_and_emails_split_as_such():
    for text in _words({"type": "string", "format": "uri"}):
        parts = urlsplit(text)
        assert parts.scheme in ("http", "https", "ftp", "urn") and (parts.netloc or parts.scheme == "urn"), text
    for text in _words({"type": "string", "format": "email"}):
        local, _, domain = text.rpartition("@")
        assert local and "." in domain, text


def test_formats_inside_optional_and_nested_schemas():
    schema = {"type": "object", "required": ["born", "seen"], "properties": {
        "born": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]},
        "seen": {"type": "array", "items": {"type": ["string", "null"], "format": "time"}, "maxItems": 2}}}
    assert invalid_words(schema, jsonschema.FormatChecker(["date"])) == []
    assert ConstraintSpec.parse(json_schema=schema).json_schema["properties"]["born"]["anyOf"][0] == \
        {"type": "string", "format": "date"}  # the request's schema itself is left as given
