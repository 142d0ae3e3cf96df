"""The forms a model writes tool calls in, for ``tool_choice`` "auto" (vLLM's ``--tool-call-parser``).

Each parser is one registry entry: the text that begins its calls, whether content may come before
them, and a reader of the calls' text -> ``[(name, arguments)]`` (None: not calls). The reading is
all or nothing, as the Hermes one always was: text that is not whole calls of the request's tools
stays content, never a crash, never a half-read call. Formats (``NAMES``):

- ``hermes``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one block a call
  (Qwen2.5 / Qwen3 templates: Dream, Fast-dLLM v2, SDAR; Ling 2.0's: LLaDA2.x).
- ``llama3_json``: the answer is ``{"name": ..., "parameters": {...}}`` objects (``;`` between
  them), after an optional ``<|python_tag|>`` (Llama 3.1 / 3.2 JSON tool calling).
- ``mistral``: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``, or the newer
  ``[TOOL_CALLS]name[ARGS]{...}`` once per call.
- ``pythonic``: the answer is a Python list of calls, ``[f(a=1), g(b="x")]`` (Llama 3.2 / 4's
  pythonic templates), arguments as Python literals.
- ``gemma4``: ``<|tool_call>call:name{key:<|"|>text<|"|>,n:1}<tool_call|>`` (Gemma 4; DiffusionGemma
  is built on it), read by ``gemma4_calls``.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any, Callable

from dllm.api.gemma4_calls import GEMMA4_OPEN, read_gemma4
from dllm.api.stops import StopConditions, first_stop_string, safe_text_length

Calls = list[tuple[Any, Any]]  # (name, arguments) as written; checked by ToolParser.split
HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
HERMES_BLOCK = re.compile(re.escape(HERMES_OPEN) + r"\s*(.*?)\s*" + re.escape(HERMES_CLOSE), re.DOTALL)
PYTHON_TAG, MISTRAL_CALLS, MISTRAL_ARGS = "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]"


@dataclass(frozen=True, slots=True)
class ToolParser:
    """One form of calls: ``markers`` begin them, anywhere in the answer (``after_content``) or only
    at its start (after blanks); ``read`` takes the text from there on."""

    name: str
    markers: tuple[str, ...]
    after_content: bool
    read: Callable[[str], Calls | None]

    def start(self, text: str) -> int | None:
        """Where the calls begin in ``text`` (None: it has none)."""
        if self.after_content:
            found = [text.find(m) for m in self.markers if m in text]
            return min(found) if found else None
        lead = len(text) - len(text.lstrip())
        return lead if text.startswith(self.markers, lead) else None

    def split(self, text: str, names: set[str]) -> tuple[str | None, list[tuple[str, str]]]:
        """``text`` -> (content before the calls, None when blank; each call's name and arguments as
        JSON text), or (text, []) unless it holds whole calls, each of a function in ``names`` with
        an object of arguments."""
        start = self.start(text)
        calls = None if start is None else _read_safely(self.read, text[start:])
        if not calls or not all(isinstance(n, str) and n in names and isinstance(a, dict) for n, a in calls):
            return text, []
        try:  # a Python literal JSON has no form for (a set, NaN) is not an argument
            written = [(name, json.dumps(arguments, ensure_ascii=False, allow_nan=False)) for name, arguments in calls]
        except (TypeError, ValueError):
            return text, []
        before = text[:start]
        return (before if before.strip() else None), written

    def content_end(self, text: str) -> int:
        """Characters of a streamed answer that are content whatever follows: all before the calls
        or before a tail that could begin them; none while they are blank (an answer of blanks and
        calls has no content), nor while an answer that may only be calls could still be some."""
        if self.after_content:
            tags = StopConditions(strings=self.markers)
            end = first_stop_string(text, tags)
            end = safe_text_length(text, tags) if end is None else end
        else:
            rest = text.lstrip()
            end = 0 if any(rest.startswith(m) or m.startswith(rest) for m in self.markers) else len(text)
        return end if text[:end].strip() else 0


def _read_safely(read: Callable[[str], Calls | None], text: str) -> Calls | None:
    try:
        return read(text)
    except (ValueError, SyntaxError, RecursionError, MemoryError):  # not calls: the text stays content
        return None


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _named_objects(value: Any, arguments: str) -> Calls | None:
    """A list of ``{"name": ..., arguments: {...}}`` objects -> calls (None: another value)."""
    if not isinstance(value, list) or not all(isinstance(v, dict) and arguments in v for v in value):
        return None
    return [(v.get("name"), v[arguments]) for v in value]


def read_hermes(text: str) -> Calls | None:
    """Every ``<tool_call>`` opened is a closed block of one call (text after the last is ignored)."""
    blocks = HERMES_BLOCK.findall(text)
    if len(blocks) != text.count(HERMES_OPEN):
        return None
    return _named_objects([_json(b) for b in blocks], "arguments")


def read_llama3_json(text: str) -> Calls | None:
    """JSON objects with ``parameters`` (or ``arguments``), ``;`` or blanks between them, nothing after."""
    text, decoder, objects, at = text.removeprefix(PYTHON_TAG), json.JSONDecoder(), [], 0
    while True:
        while at < len(text) and (text[at].isspace() or (text[at] == ";" and objects)):
            at += 1
        if at == len(text):
            break
        value, at = decoder.raw_decode(text, at)
        if not isinstance(value, dict):
            return None
        objects.append({"name": value.get("name"), "arguments": value.get("parameters", value.get("arguments"))})
    return _named_objects(objects, "arguments")


def read_mistral(text: str) -> Calls | None:
    """``[TOOL_CALLS]`` then a JSON list of calls, or ``[TOOL_CALLS]name[ARGS]{...}`` per call."""
    pieces = text.split(MISTRAL_CALLS)[1:]
    if len(pieces) == 1 and pieces[0].lstrip().startswith("["):
        return _named_objects(_json(pieces[0]), "arguments")
    calls: Calls = []
    for piece in pieces:
        name, found, arguments = piece.partition(MISTRAL_ARGS)
        if not found:
            return None
        calls.append((name.strip(), json.loads(arguments)))
    return calls


def read_pythonic(text: str) -> Calls | None:
    """A Python list of calls by name with keyword arguments of literal values, nothing else."""
    tree = ast.parse(text.strip(), mode="eval").body
    if not isinstance(tree, ast.List):
        return None
    calls: Calls = []
    for node in tree.elts:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args
                and all(k.arg is not None for k in node.keywords)):
            return None
        calls.append((node.func.id, {k.arg: ast.literal_eval(k.value) for k in node.keywords}))
    return calls


PARSERS = {p.name: p for p in (
    ToolParser("hermes", (HERMES_OPEN,), True, read_hermes),
    ToolParser("llama3_json", (PYTHON_TAG, "{"), False, read_llama3_json),
    ToolParser("mistral", (MISTRAL_CALLS,), True, read_mistral),
    ToolParser("pythonic", ("[",), False, read_pythonic),
    ToolParser("gemma4", (GEMMA4_OPEN,), True, read_gemma4),
)}
NAMES = tuple(PARSERS)


def split_markers(parser: ToolParser, tokenizer) -> list[str]:
    """The parser's markers of more than one character that ``tokenizer`` writes as several tokens:
    a model trained for the form has each as one special token (vLLM's parsers refuse a tokenizer
    without them). Calls are read from text, so such markers still work under a constraint, but a
    model left free is unlikely to write them."""
    return [m for m in parser.markers if len(m) > 1 and len(tokenizer.encode(m, add_special_tokens=False)) != 1]


def tool_parser(name: str) -> ToolParser:
    """The parser called ``name``; a ValueError lists the known ones."""
    if name not in PARSERS:
        raise ValueError(f"unknown tool call parser {name!r}; dllm reads {', '.join(NAMES)}")
    return PARSERS[name]
