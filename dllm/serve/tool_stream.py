"""A streamed chat choice of a request with tools: its final text -> OpenAI's deltas.

The answer's text arrives as it becomes final (a prefix that never changes), so a named call's
arguments stream as they come, content before an ``auto`` answer's calls (Hermes' first
``<tool_call>``, or the form its parser names) streams as content (held back only while it could
begin them: ``ToolParser.content_end``), and a ``required`` answer's
calls, or an ``auto`` answer's, go out whole at the end, when the text is known to be calls: the
deltas joined give the message of the whole response.
"""
from __future__ import annotations

from typing import Any

from dllm.api.tools import ToolChoice, new_call_id


def finish_reason(choice: ToolChoice | None, calls: int, reason: str | None) -> str | None:
    """OpenAI's finish reason: "tool_calls" for a decode that ended calling tools it chose
    (``auto`` / ``required``); a named call, as OpenAI's, ends "stop"."""
    if choice is not None and calls and reason == "stop" and choice.mode != "named":
        return "tool_calls"
    return reason


class ToolStream:
    """One choice's deltas: ``feed`` each piece of final text, ``finish`` at its end."""

    def __init__(self, choice: ToolChoice) -> None:
        self.choice, self.text, self.sent, self.calls = choice, "", 0, 0
        self.call_id = new_call_id()

    def feed(self, text: str) -> list[dict[str, Any]]:
        self.text += text
        if self.choice.mode == "named":
            return [self._named(text)] if text else []
        if self.choice.mode == "required":
            return []
        safe = len(self.text) if self.choice.mode == "none" else self.choice.calls_form.content_end(self.text)
        return self._content(safe)

    def finish(self) -> list[dict[str, Any]]:
        if self.choice.mode == "named":
            self.calls = 1
            return [] if self.sent else [self._named("")]  # an empty answer still names its call
        if self.choice.mode == "none":
            return self._content(len(self.text))
        content, calls = self.choice.read(self.text)
        if not calls:
            return self._content(len(self.text))
        self.calls = len(calls)
        deltas = [] if self.sent or not content else [{"content": content}]
        return deltas + [{"tool_calls": [dict(call.openai(), index=i) for i, call in enumerate(calls)]}]

    def _named(self, arguments: str) -> dict[str, Any]:
        if self.sent:
            return {"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}
        self.sent = 1
        call = self.choice.read(arguments)[1][0].openai(self.call_id)
        return {"tool_calls": [dict(call, index=0)]}

    def _content(self, end: int) -> list[dict[str, Any]]:
        if end <= self.sent:
            return []
        piece, self.sent = self.text[self.sent:end], end
        return [{"content": piece}]
