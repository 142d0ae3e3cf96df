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


@pytest.mark.parametrize("fmt", ["date", "time", "date-time", "email", "uri", "uuid", "ipv4"])
def test_every_word_is_a_json_string(fmt):
    checker = jsonschema.FormatChecker(["date", "email", "uuid", "ipv4"])
    assert invalid_words({"type": "string", "format": fmt}, checker) == []


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


def test_ipv4_addresses_are_dotted_quads_without_leading_zeros():
    """outlines-core refuses ipv4; dllm writes it: four octets 0-255, no leading zero (which
    Python's ipaddress, jsonschema's check, refuses as ambiguous octal)."""
    ipv4 = _regex("ipv4")
    assert all(ipv4.fullmatch(f'"{ip}"') for ip in ("0.0.0.0", "10.0.0.1", "192.168.1.254", "255.255.255.255"))
    assert not any(ipv4.fullmatch(f'"{ip}"') for ip in ("256.1.1.1", "1.2.3", "01.2.3.4", "1.2.3.4.5", "1.2.3.-4"))


@pytest.mark.parametrize("fmt", ["hostname", "ipv6", "binary"])
def test_a_format_nothing_writes_is_refused_by_place(fmt):
    """Formats neither dllm nor outlines-core writes are refused when the spec is parsed (outlines-core
    would fail only at the regex step, with no place), naming the format, where, and the fix."""
    schema = {"type": "object", "properties": {"host": {"type": ["string", "null"], "format": fmt}}}
    with pytest.raises(ValueError, match=rf"'format' '{fmt}' at /properties/host .*ipv4.*give a 'pattern'"):
        ConstraintSpec.parse(json_schema=schema)
    assert ConstraintSpec.parse(json_schema={"type": "integer", "format": "int32"}) is not None  # not a string's


def test_an_object_closed_to_every_property_is_written_empty():
    """{"type": "object", "additionalProperties": false} without properties (outlines-core fails on
    it) is the empty object, beside a closed object with properties and an open one."""
    closed = {"type": "object", "additionalProperties": False}
    schema = {"type": "object", "required": ["none", "open"], "properties": {
        "none": closed, "open": {"type": "object", "additionalProperties": {"type": "integer"}}}}
    assert {word.replace(" ", "") for word in regex_words(ConstraintSpec.parse(json_schema=closed).to_regex(), 20)} \
        == {"{}"}
    assert invalid_words(schema) == []
    regex = re.compile(ConstraintSpec.parse(json_schema=schema).to_regex())
    assert regex.fullmatch('{"none": {}, "open": {"a": 1}}') and not regex.fullmatch('{"none": {"a": 1}, "open": {}}')
