"""A request body -> JSON whose every string is valid Unicode.

JSON may escape a lone UTF-16 surrogate (``"\\ud800"``); Python decodes it into a ``str`` that no
tokenizer can encode (a TypeError deep inside it). Such a body is a 400 that names the field.
"""
from __future__ import annotations

import json
from typing import Any

from dllm.serve.requests import RequestError


def parse_json(raw: bytes) -> Any:
    """The body's JSON, every string checked (``check_unicode``)."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RequestError(f"the request body is not valid JSON ({err})") from None
    check_unicode(body)
    return body


def check_unicode(value: Any, where: str = "") -> None:
    """Raise a RequestError naming the first string (or key) under ``value`` that holds a lone
    surrogate."""
    stack = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            _check_text(item, path)
        elif isinstance(item, dict):
            for key, sub in item.items():
                _check_text(key, path)
                stack.append((sub, f"{path}.{key}" if path else key))
        elif isinstance(item, list):
            stack.extend((sub, f"{path}[{i}]") for i, sub in enumerate(item))


def _check_text(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        top = path.split(".")[0].split("[")[0] or None
        raise RequestError(f"{path or 'the body'} holds an invalid Unicode character ({err.reason} at "
                           f"character {err.start}: a lone UTF-16 surrogate such as \\ud800); send valid "
                           "UTF-8 text", top) from None
