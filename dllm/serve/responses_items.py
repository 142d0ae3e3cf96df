"""The output items of a /v1/responses answer, whole and streamed: chat's message (its content and
``tool_calls``) -> a ``message`` item holding the text (none when a call has no text with it) and
a ``function_call`` item per call, in that order.

An item closed before the answer ends is ``completed``; the last one has the response's status
(``incomplete`` when the answer was cut). A stream opens each item when its first piece arrives
and closes it when the next one opens or the answer ends, so the events of ``StreamedItems`` add
up to the items ``output_items`` gives the whole response.
"""
from __future__ import annotations

import json
from typing import Any


def output_items(chat_id: str, content: str | None, calls: list[dict[str, Any]], status: str) -> list[dict[str, Any]]:
    """A finished answer's items: chat's ``content`` and ``tool_calls`` (``calls``)."""
    items = [message_item(chat_id, content or "", "completed")] if content or not calls else []
    items += [call_item(call, "completed") for call in calls]
    items[-1]["status"] = status
    return items


def message_item(chat_id: str, text: str | None, status: str) -> dict[str, Any]:
    """The answer's text as a message item (no content part yet: ``text`` None)."""
    content = [] if text is None else [_text_part(text)]
    return {"type": "message", "id": message_id(chat_id), "status": status, "role": "assistant",
            "content": content}


def call_item(call: dict[str, Any], status: str) -> dict[str, Any]:
    """A chat tool call (``{"id", "type", "function": {"name", "arguments"}}``) as a function_call item:
    ``call_id`` is chat's call id, the item's own id ``fc_`` and the same suffix."""
    return {"type": "function_call", "id": _call_item_id(call["id"]), "call_id": call["id"],
            "name": call["function"]["name"], "arguments": call["function"]["arguments"], "status": status}


def _call_item_id(call_id: str) -> str:
    return "fc_" + call_id.removeprefix("call_")


def message_id(chat_id: str) -> str:
    return "msg_" + chat_id.removeprefix("chatcmpl-")


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


class EventCounter:
    """SSE events of one stream, numbered from 0 (``sequence_number``)."""

    def __init__(self) -> None:
        self.next = 0

    def emit(self, kind: str, **fields: Any) -> str:
        body = {"type": kind, "sequence_number": self.next, **fields}
        self.next += 1
        return f"event: {kind}\ndata: {json.dumps(body)}\n\n"

    def error(self, error: dict[str, Any]) -> str:
        """Responses' error event, carrying chat's ``error`` object too (what the openai client raises)."""
        return self.emit("error", code=str(error.get("code")), message=error.get("message"),
                         param=error.get("param"), error=error)


class StreamedItems:
    """One streamed answer's items, as events: ``delta`` for each chat delta (its ``content`` and
    ``tool_calls`` pieces), ``finish`` at the end. The message item opens at the first text; a call
    opens at its first delta (chat's id and name) and its arguments follow as they arrive; chat
    sends an answer's text before its calls (``tool_stream``)."""

    def __init__(self, chat_id: str, events: EventCounter) -> None:
        self.chat_id, self.events = chat_id, events
        self.content: str | None = None  # None until the first text
        self.calls: list[dict[str, Any]] = []  # chat's tool calls, their arguments joined so far
        self.index = -1  # the open item's output_index (-1: none yet); it stays open until the next opens

    def delta(self, delta: dict[str, Any]) -> str:
        events = self._text(delta["content"]) if delta.get("content") else ""
        return events + "".join(self._call(call) for call in delta.get("tool_calls") or [])

    def finish(self, status: str) -> str:
        """The last item closed with the response's ``status`` (a message of no text when the answer
        gave neither text nor calls)."""
        events = self._open_message() if self.index < 0 else ""
        return events + self._close(output_items(self.chat_id, self.content, self.calls, status)[-1])

    def _text(self, text: str) -> str:
        events = self._open_message() if self.content is None else ""
        self.content = (self.content or "") + text
        return events + self.events.emit("response.output_text.delta", item_id=message_id(self.chat_id),
                                         output_index=self.index, content_index=0, delta=text, logprobs=[])

    def _open_message(self) -> str:
        self.content = self.content or ""
        return self._add(message_item(self.chat_id, None, "in_progress")) + self.events.emit(
            "response.content_part.added", item_id=message_id(self.chat_id), output_index=self.index,
            content_index=0, part=_text_part(""))

    def _call(self, delta: dict[str, Any]) -> str:
        events = ""
        function = delta.get("function") or {}
        if delta["index"] == len(self.calls):  # a new call: chat's first delta of it has its id and name
            if self.index >= 0:  # the item before it is done: the previous call, or the message
                events += self._close(call_item(self.calls[-1], "completed") if self.calls
                                      else message_item(self.chat_id, self.content, "completed"))
            self.calls.append({"id": delta["id"], "type": "function",
                               "function": {"name": function["name"], "arguments": ""}})
            events += self._add(call_item(self.calls[-1], "in_progress"))
        call = self.calls[delta["index"]]
        piece = function.get("arguments") or ""
        call["function"]["arguments"] += piece
        if piece:
            events += self.events.emit("response.function_call_arguments.delta", item_id=_call_item_id(call["id"]),
                                       output_index=self.index, delta=piece)
        return events

    def _add(self, item: dict[str, Any]) -> str:
        self.index += 1
        return self.events.emit("response.output_item.added", output_index=self.index, item=item)

    def _close(self, item: dict[str, Any]) -> str:
        """The open item's done events, ``item`` its final form."""
        emit, index = self.events.emit, self.index
        if item["type"] == "message":
            part = item["content"][0]
            events = (emit("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                           text=part["text"], logprobs=[])
                      + emit("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                             part=part))
        else:
            events = emit("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                          arguments=item["arguments"])
        return events + emit("response.output_item.done", output_index=index, item=item)
