"""A request body -> JSON whose every string is valid Unicode.

JSON may escape a lone UTF-16 surrogate (``"\\ud800"``); Python decodes it into a ``str`` that no
tokenizer can encode (a TypeError deep inside it). Such a body is a 400 that names the field.
Surrogates can only come from such escapes (UTF-8 bytes cannot encode them: they fail to
decode), so the strings are walked only when the raw body holds one.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import re
from typing import Any

from dllm.serve.requests import RequestError

SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
BIG_BODY = 1 << 20  # after parsing a body this large, freed memory goes back to the system


def parse_json(raw: bytes) -> Any:
    """The body's JSON, every string checked (``check_unicode``)."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RequestError(f"the request body is not valid JSON ({err})") from None
    if SURROGATE_ESCAPE.search(raw):
        check_unicode(body)
    return body


def release_memory() -> None:
    """Hand freed heap back to the system (glibc keeps a thread's arena otherwise: a few large
    refused bodies would leave the process tens of MB larger for good)."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def _find_malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc
        return None


_malloc_trim = _find_malloc_trim()


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
