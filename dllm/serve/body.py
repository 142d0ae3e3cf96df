"""A request body -> JSON nested at most ``MAX_JSON_DEPTH`` deep whose every string is valid Unicode.

The depth is read from the raw bytes before ``json.loads`` runs (linear in the body, in C and
torch: escapes dropped, strings dropped, the brackets left counted): a body nested a thousand
levels deep is a 400, not a RecursionError inside the parser that surfaced as a 503 or a 500.

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

import torch

from dllm.serve.requests import RequestError

SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
BIG_BODY = 1 << 20  # after parsing a body this large, freed memory goes back to the system
# Arrays and objects inside each other: an OpenAI request needs 5 (messages, a message, its list
# content, a part); 64 leaves room for any client's metadata and stays far from the parser's
# recursion limit
MAX_JSON_DEPTH = 64
ESCAPE = re.compile(rb"\\.", re.DOTALL)  # a backslash and the byte it escapes
STRING = re.compile(rb'"[^"]*"')  # a string once its escapes are gone
NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
OPENERS = torch.tensor(list(b"[{"), dtype=torch.uint8)


def parse_json(raw: bytes) -> Any:
    """The body's JSON, its depth checked first (``json_depth``), every string checked
    (``check_unicode``)."""
    depth = json_depth(raw)
    if depth > MAX_JSON_DEPTH:
        raise RequestError(f"the request body nests arrays and objects {depth} deep; the server takes at most "
                           f"{MAX_JSON_DEPTH} (an OpenAI request needs 5): send a flatter body")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RequestError(f"the request body is not valid JSON ({err})") from None
    except RecursionError:  # not expected under MAX_JSON_DEPTH; never a 5xx
        raise RequestError(f"the request body nests too deep; the server takes at most {MAX_JSON_DEPTH} levels "
                           "of arrays and objects: send a flatter body") from None
    if SURROGATE_ESCAPE.search(raw):
        check_unicode(body)
    return body


def json_depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects in ``raw`` (brackets inside strings not
    counted); valid JSON or not, in time linear in its length."""
    brackets = STRING.sub(b"", ESCAPE.sub(b"", raw)).translate(None, NOT_BRACKET)
    if not brackets:
        return 0
    codes = torch.frombuffer(bytearray(brackets), dtype=torch.uint8)
    steps = torch.where(torch.isin(codes, OPENERS), 1, -1).to(torch.int32)
    return max(0, int(torch.cumsum(steps, 0).max()))


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
