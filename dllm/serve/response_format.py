"""OpenAI's ``response_format`` on completions and chat: ``text`` (free), ``json_object`` (any
JSON object) or ``json_schema`` (``{"name", "schema", "strict"}``), and dllm's ``grammar``
(``{"type": "grammar", "grammar": "<Lark EBNF>"}``): the schema or grammar it asks for, read by
``structured_fields.py`` beside vLLM's structured-output fields and compiled into the rows'
constraint (``dllm.api.structured``) while the request is parsed, before any model work.

A constraint is always enforced: ``strict: false`` (OpenAI: the schema is followed when the model
manages) gets the same guarantee as ``strict: true``, never less."""
from __future__ import annotations

from typing import Any

FIELD = "response_format"
JSON_SCHEMA_KEYS = {"name", "schema", "strict", "description"}


def _error(message: str) -> ValueError:
    return ValueError(message)  # the request parser answers it as a 400 on this field


def response_schema(value: Any) -> dict | None:
    """The JSON schema a ``response_format`` asks for (None: free text)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise _error('response_format must be an object with a "type": "text", "json_object", "json_schema" '
                     'or "grammar"')
    kind = value["type"]
    if kind == "text" and set(value) == {"type"}:
        return None
    if kind == "json_object" and set(value) == {"type"}:
        return {"type": "object"}
    if kind == "json_schema" and set(value) == {"type", "json_schema"}:
        spec = value["json_schema"]
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or set(spec) - JSON_SCHEMA_KEYS:
            raise _error('response_format.json_schema must be {"name": str, "schema": {...}, "strict": bool} '
                         f"(optionally \"description\"), got {spec!r}")
        if "strict" in spec and spec["strict"] is not None and not isinstance(spec["strict"], bool):
            raise _error(f"response_format.json_schema.strict must be true or false, got {spec['strict']!r}")
        if not isinstance(spec.get("schema"), dict):
            raise _error("response_format.json_schema.schema must be a JSON schema object")
        return spec["schema"]
    raise _error(f"response_format {value!r} is not one of {{\"type\": \"text\"}}, {{\"type\": \"json_object\"}}, "
                 '{"type": "json_schema", "json_schema": {...}}, {"type": "grammar", "grammar": "<Lark EBNF>"}')


def response_grammar(value: Any) -> str | None:
    """The Lark grammar a ``{"type": "grammar", "grammar": str}`` response_format asks for (None:
    another kind)."""
    if not isinstance(value, dict) or value.get("type") != "grammar":
        return None
    if set(value) != {"type", "grammar"} or not isinstance(value["grammar"], str):
        raise _error(f'response_format of type grammar must be {{"type": "grammar", "grammar": "<Lark EBNF>"}}, '
                     f"got {value!r}")
    return value["grammar"]

