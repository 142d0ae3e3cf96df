"""Gemma 4's tool calls: ``<|tool_call>call:name{key:value,...}<tool_call|>``, one block a call.

Its arguments are not JSON: keys are bare, strings sit between ``<|"|>`` marks (so they hold any
character unescaped), and other values are bare words (numbers, true, false, null), ``{...}``
objects of the same form or ``[...]`` lists. A block that does not read whole is not a call.
"""
from __future__ import annotations

import json
import re
from typing import Any

GEMMA4_OPEN, GEMMA4_CLOSE, QUOTE = "<|tool_call>", "<tool_call|>", '<|"|>'
BLOCK = re.compile(re.escape(GEMMA4_OPEN) + r"(.*?)" + re.escape(GEMMA4_CLOSE), re.DOTALL)
HEAD = re.compile(r"\s*call:([\w.-]+)\s*(?=\{)")
BARE_END = re.compile(r"[,}\]]")


def read_gemma4(text: str) -> list[tuple[str, Any]] | None:
    """Every ``<|tool_call>`` opened is a closed block of one call (text after the last is ignored)."""
    blocks = BLOCK.findall(text)
    if len(blocks) != text.count(GEMMA4_OPEN):
        return None
    calls = []
    for block in blocks:
        head = HEAD.match(block)
        if head is None:
            return None
        reader = _Reader(block, head.end())
        arguments = reader.value()
        if not isinstance(arguments, dict) or block[reader.at:].strip():
            return None
        calls.append((head.group(1), arguments))
    return calls


class _Reader:
    """A cursor over one call's arguments; a ValueError where they are not of the form."""

    def __init__(self, text: str, at: int) -> None:
        self.text, self.at = text, at

    def value(self) -> Any:
        self._blanks()
        if self.text.startswith(QUOTE, self.at):
            end = self.text.find(QUOTE, self.at + len(QUOTE))
            if end < 0:
                raise ValueError("an unclosed string")
            value, self.at = self.text[self.at + len(QUOTE):end], end + len(QUOTE)
            return value
        if self.text.startswith("{", self.at):
            return dict(self._items("}", self._pair))
        if self.text.startswith("[", self.at):
            return list(self._items("]", self.value))
        end = BARE_END.search(self.text, self.at)
        word = self.text[self.at:end.start() if end else len(self.text)].strip()
        if not word:
            raise ValueError("a missing value")
        self.at = end.start() if end else len(self.text)
        try:  # numbers, true, false, null
            return json.loads(word)
        except ValueError:
            return word  # a bare word: text, as Gemma's own reader takes it

    def _pair(self) -> tuple[str, Any]:
        self._blanks()
        colon = self.text.find(":", self.at)
        key = self.text[self.at:colon].strip() if colon >= 0 else ""
        if not re.fullmatch(r"[\w.-]+", key):
            raise ValueError("a key that is not a name")
        self.at = colon + 1
        return key, self.value()

    def _items(self, close: str, item) -> list:
        self.at += 1  # past the opening bracket
        items = []
        self._blanks()
        if self.text.startswith(close, self.at):
            self.at += 1
            return items
        while True:
            items.append(item())
            self._blanks()
            if self.text.startswith(",", self.at):
                self.at += 1
            elif self.text.startswith(close, self.at):
                self.at += 1
                return items
            else:
                raise ValueError(f"expected ',' or {close!r}")

    def _blanks(self) -> None:
        while self.at < len(self.text) and self.text[self.at].isspace():
            self.at += 1
