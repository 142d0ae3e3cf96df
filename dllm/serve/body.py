"""A request body -> JSON nested at most ``MAX_JSON_DEPTH`` deep whose every string is valid Unicode,
its HTTP framing (Content-Encoding, charset) undone first.

The depth is read from the raw bytes before ``json.loads`` runs (linear in the body, in C and
torch: escapes dropped, strings dropped, the brackets left counted): a body nested a thousand
levels deep is a 400, not a RecursionError inside the parser that surfaced as a 503 or a 500.

JSON may escape a lone UTF-16 surrogate (``"\\ud800"``); Python decodes it into a ``str`` that no
tokenizer can encode (a TypeError deep inside it). Such a body is a 400 that names the field.
Surrogates can only come from such escapes (UTF-8 bytes cannot encode them: they fail to
decode), so the strings are walked only when the raw body holds one.

The framing (``RequestGuard`` calls ``content_codings``, ``body_charset``, ``decode_body`` and
``recode``): the body's ``Content-Encoding`` (gzip and deflate, as httpx, requests and curl send
them) and a ``charset`` other than UTF-8 in its ``Content-Type``.
Compressed bytes were read as JSON (a 400 about a UTF-8 byte that named neither the header nor the
fix), and a body that said ``Content-Encoding: br`` was taken as plain JSON when it happened to be.
A coding the server cannot undo is a 415 naming the ones it can (RFC 9110 12.5.3,
``Accept-Encoding`` in the answer); a decoded body is held to the same size limit as a plain one,
so a small compressed body cannot expand past it. JSON is UTF-8 (RFC 8259); a body that declares
another text encoding is read in it and handed on as UTF-8 (ISO-8859-1's accented letters were a
400).
"""
from __future__ import annotations

import codecs
import ctypes
import ctypes.util
import json
import re
import zlib
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
GZIP_BITS = 16 + zlib.MAX_WBITS  # zlib's window bits for the gzip wrapper
WINDOW_BITS = {"gzip": GZIP_BITS, "x-gzip": GZIP_BITS, "deflate": zlib.MAX_WBITS}  # deflate: the zlib format
ACCEPTED_ENCODINGS = "gzip, deflate"
# what json.loads reads from bytes as they are (it tells UTF-8, -16 and -32 apart; ASCII is UTF-8)
JSON_READS = {"utf-8", "ascii", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"}



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


class CodingError(ValueError):
    """A body the server cannot read as sent: HTTP ``status`` with the reason and the fix."""

    def __init__(self, message: str, status: int = 400, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.headers = status, headers or {}


def content_codings(headers: list[str]) -> list[str]:
    """The codings the ``Content-Encoding`` header values list, in the order they were applied
    (``identity`` dropped); a 415 for one the server cannot undo, before the body is read."""
    names = [name.strip().lower() for value in headers for name in value.split(",")]
    codings = [name for name in names if name and name != "identity"]
    unknown = [name for name in codings if name not in WINDOW_BITS]
    if unknown:
        raise CodingError(f"Content-Encoding {unknown[0]!r} is not one this server decodes; send the body "
                          f"uncompressed or compressed with {ACCEPTED_ENCODINGS}", 415,
                          {"Accept-Encoding": ACCEPTED_ENCODINGS})
    return codings


def decode_body(raw: bytes, codings: list[str], limit: int) -> bytes:
    """``raw`` with ``codings`` undone, last applied first; a 413 once the decoded body passes
    ``limit`` bytes (it is never inflated further), a 400 for data that is not what its header says."""
    for name in reversed(codings):
        raw = _inflate(raw, name, limit)
    return raw


def _inflate(data: bytes, name: str, limit: int) -> bytes:
    out = bytearray()
    while data:  # gzip: one member after another (RFC 1952 allows several)
        inflater = zlib.decompressobj(WINDOW_BITS[name])
        try:
            out += inflater.decompress(data, limit + 1 - len(out))
        except zlib.error as err:
            raise CodingError(f"the request body is not valid {name} data ({err}), as its Content-Encoding "
                              "says; send it uncompressed, or fix the compression") from None
        if len(out) > limit:
            raise CodingError(f"the request body, decompressed ({name}), is larger than the server's limit of "
                              f"{limit} bytes; send a shorter prompt or start the server with a larger "
                              "--max-body-mb", 413)
        if not inflater.eof:
            raise CodingError(f"the request body's {name} data ends early; send the whole compressed body")
        data = inflater.unused_data
        if data and name == "deflate":
            raise CodingError(f"the request body has {len(data)} bytes after its deflate data; send one stream")
    return bytes(out)


def body_charset(content_type: str | None) -> str | None:
    """The text encoding ``Content-Type``'s charset names, when the body must be recoded to UTF-8
    (None: json reads it as it is); a 415 for a name that is no text encoding."""
    for param in (content_type or "").split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() != "charset":
            continue
        name = value.strip().strip('"').strip()
        try:
            info = codecs.lookup(name)
        except LookupError:
            info = None
        if info is None or not getattr(info, "_is_text_encoding", True):
            raise CodingError(f"charset {name!r} is not a text encoding this server knows; send the JSON body "
                              "as UTF-8 (charset=utf-8, or no charset)", 415)
        return None if info.name in JSON_READS else info.name
    return None


def recode(raw: bytes, charset: str) -> bytes:
    """``raw``, read in ``charset``, as UTF-8; a 400 when it is not text in that encoding."""
    try:
        return raw.decode(charset).encode("utf-8")
    except UnicodeError as err:
        raise CodingError(f"the request body is not {charset} text, as its Content-Type says ({err}); send it "
                          "as UTF-8") from None
