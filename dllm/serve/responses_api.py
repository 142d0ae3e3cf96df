"""OpenAI's Responses API (``POST /v1/responses``) on top of the chat path: a request becomes the
chat request ``requests.parse_request`` validates (``input`` -> messages, ``instructions`` -> a
system message first, ``max_output_tokens``, ``text.format`` -> ``response_format``, dllm's extra
fields passed through), and the chat handler's answer (a chat.completion, or its SSE chunks) becomes
a ``response`` object (or the Responses stream events the openai SDK's ``responses.stream``
consumes). Nothing is decoded twice and nothing is validated twice.

Function tools are chat's (``responses_tools``): ``tools``, ``tool_choice``, ``parallel_tool_calls``
and the ``function_call`` / ``function_call_output`` input items become chat's fields and tool turns,
and chat's calls come back as ``function_call`` output items after the text's message
(``responses_items``). What would change the answer and is not served (``previous_response_id``,
tools other than functions, ``reasoning``, ``include``, images and files in the input,
``background``, ``truncation: "auto"``, ...) is a 400
naming the field and the fix, before any model work. ``store`` is accepted and nothing is stored
(there is no retrieval endpoint), as vLLM does without its response store: the response says
``"store": false``. A stream ends with ``response.completed`` whatever the status (as vLLM and
SGLang send it; ``status: "incomplete"`` tells a cut answer), so the SDK's ``get_final_response``
works for both. The response carries dllm's reading in an extra ``dllm`` field, as chat's choices
do: the seed, dllm's finish reason, the answer's token ids and the row's stats.
"""
from __future__ import annotations

import json
import re
import time
from typing import Any, AsyncIterator, Callable

from fastapi.responses import JSONResponse, Response, StreamingResponse

from dllm.serve.requests import DLLM_OPTIONS, IGNORED_FIELDS, ParsedRequest, RequestError
from dllm.serve.responses_items import EventCounter, StreamedItems, output_items
from dllm.serve.responses_tools import add_call, call_output, chat_tools
from dllm.serve.structured_fields import FIELDS as CONSTRAINT_FIELDS

TRANSLATED = {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "text", "stream",
              "stream_options", "tools", "tool_choice", "parallel_tool_calls"}
IGNORED = IGNORED_FIELDS  # accepted with any value and ignored, as on chat
PASSED = {*DLLM_OPTIONS, *CONSTRAINT_FIELDS, "seed", "stop", "stop_token_ids"}  # dllm's extras, as on chat
NO_STORE = ("this server stores no responses: send the earlier turns in input (the assistant's answers as "
            "role assistant messages)")
# Responses fields that would change the answer and that dllm does not serve: their neutral values,
# and the fix a refusal names
UNSUPPORTED: dict[str, tuple[tuple[Any, ...], str]] = {
    "previous_response_id": ((None,), NO_STORE),
    "conversation": ((None,), NO_STORE),
    "max_tool_calls": ((None,), "it caps built-in tools' calls, and dllm serves function tools only; leave it out "
                                "(parallel_tool_calls: false makes one call)"),
    "reasoning": ((None,), "dllm's models have no reasoning settings; leave reasoning out"),
    "include": ((None, []), "nothing more can be included; for logprobs use /v1/chat/completions with "
                            "logprobs=true"),
    "top_logprobs": ((None, 0), "use /v1/chat/completions with logprobs=true and top_logprobs"),
    "background": ((None, False), "nothing is stored to poll: drop background (or stream the response)"),
    "truncation": ((None, "disabled"), 'dllm never drops input to fit the context (truncation "disabled"); '
                                       "shorten the input instead"),
    "prompt": ((None,), "stored prompt templates do not exist here; send the text in input and instructions"),
    "context_management": ((None, []), "leave context_management out"),
    "moderation": ((None,), "dllm runs no moderation of input or output; leave moderation out"),
}
TEXT_KEYS = {"format", "verbosity"}
FORMATS = {"text", "json_object", "json_schema", "grammar"}  # grammar: dllm's Lark EBNF, as on chat
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
MESSAGE_KEYS = {"type", "role", "content", "id", "status"}  # id/status: a previous output item sent back
ITEMS = ("message", "function_call", "function_call_output")
TEXT_PARTS = {"input_text", "output_text"}
# the chat request's field names in its errors -> this endpoint's
CHAT_NAMES = {"max_completion_tokens": "max_output_tokens", "response_format.json_schema": "text.format",
              "response_format": "text.format",
              "the messages have": "the input has", "messages": "input"}
# chat's forms in its tool errors (patterns) -> this endpoint's
CHAT_FORMS = {re.escape('{"type": "function", "function": {"name": ...}}'): '{"type": "function", "name": ...}',
              r"\btools\[(\d+)\]\.function\b": r"tools[\1]"}
REASONS = {"length": "max_output_tokens"}  # chat finish reason -> incomplete_details.reason
# another API's request checker: (its JSON body, the chat request parser) -> the parsed chat request
Translate = Callable[[Any, Callable[[dict[str, Any]], ParsedRequest]], ParsedRequest]


def _refuse(message: str, field: str) -> RequestError:
    return RequestError(message, field.split(".")[0])


def chat_body(body: Any) -> dict[str, Any]:
    """The chat request a Responses request asks for; a RequestError (400) for what it cannot be."""
    if not isinstance(body, dict):
        raise RequestError(f"the request body must be a JSON object, got {type(body).__name__}")
    for key, (neutral, fix) in UNSUPPORTED.items():
        if body.get(key, None) not in neutral:
            raise _refuse(f"{key} is not supported on /v1/responses: {fix}", key)
    unknown = sorted(set(body) - TRANSLATED - IGNORED - PASSED - set(UNSUPPORTED))
    if unknown:
        raise _refuse(f"unknown field(s) {unknown} for /v1/responses; it takes {sorted(TRANSLATED)}, ignores "
                      f"{sorted(IGNORED)} and passes dllm's options {sorted(PASSED)}", unknown[0])
    chat: dict[str, Any] = {key: body[key] for key in PASSED | {"model", "temperature", "top_p"} if key in body}
    chat["messages"] = _instructions(body.get("instructions")) + _input(body.get("input"))
    chat.update(chat_tools(body))
    if body.get("max_output_tokens") is not None:
        chat["max_completion_tokens"] = body["max_output_tokens"]
    response_format = _text_format(body.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    if body.get("stream") is not None:
        chat["stream"] = body["stream"]
        if body["stream"] is True:  # the stream's last event carries the usage
            chat["stream_options"] = {"include_usage": True}
    options = body.get("stream_options")
    if options is not None and (not isinstance(options, dict) or set(options) - {"include_obfuscation"}):
        raise _refuse('stream_options takes {"include_obfuscation": bool} (accepted and ignored)', "stream_options")
    if options is not None and body.get("stream") is not True:
        raise _refuse("stream_options is only allowed with stream=true", "stream_options")
    return chat


def _instructions(value: Any) -> list[dict[str, str]]:
    if value is None:
        return []
    if not isinstance(value, str):
        raise _refuse(f"instructions must be a string (the system message), got {type(value).__name__}",
                      "instructions")
    return [{"role": "system", "content": value}]


def _input(value: Any) -> list[dict[str, Any]]:
    """``input``: a string (one user message) or a list of items (messages, function calls and
    their outputs) -> chat messages."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise _refuse('input must be a string or a non-empty list of messages {"role": ..., "content": ...}',
                      "input")
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        kind = item.get("type", "message") if isinstance(item, dict) else type(item).__name__
        if kind not in ITEMS:
            raise _refuse(f"input item {i} is {kind!r}; dllm takes {', '.join(ITEMS)} items", "input")
        if kind == "function_call":
            add_call(messages, item, i)
        elif kind == "function_call_output":
            messages.append(call_output(messages, item, i, _content(item.get("output"), i, "output")))
        else:
            messages.append(_message(item, i))
    return messages


def _message(item: dict[str, Any], i: int) -> dict[str, str]:
    extra = sorted(set(item) - MESSAGE_KEYS)
    if extra:
        raise _refuse(f"input item {i} has unknown key(s) {extra}; a message is "
                      '{"role": ..., "content": ...}', "input")
    role = item.get("role")
    if role not in ROLES:
        raise _refuse(f"input item {i} has role {role!r}; give one of {sorted(ROLES)}", "input")
    return {"role": ROLES[role], "content": _content(item.get("content"), i)}


def _content(content: Any, i: int, key: str = "content") -> str:
    """A message's content (a function call's output): a string, or its text parts joined by
    newlines (as chat joins them)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _refuse(f"input item {i}: {key} must be a string or a list of input_text parts", "input")
    texts = []
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if kind not in TEXT_PARTS or not isinstance(part.get("text"), str):
            raise _refuse(f"input item {i}, {key} part {k} is {kind!r}; dllm reads text only "
                          '({"type": "input_text", "text": "..."}): leave images, files and audio out', "input")
        texts.append(part["text"])
    return "\n".join(texts)


def _text_format(text: Any) -> dict[str, Any] | None:
    """``text: {"format": ...}`` -> chat's ``response_format`` (None: free text)."""
    if text is None:
        return None
    if not isinstance(text, dict) or set(text) - TEXT_KEYS:
        raise _refuse('text must be {"format": {...}} (and optionally "verbosity")', "text")
    if text.get("verbosity") not in (None, "medium"):
        raise _refuse(f"text.verbosity {text['verbosity']!r} is not supported on /v1/responses: dllm does not steer "
                      'the answer\'s length that way; leave it out (or "medium") and set max_output_tokens', "text")
    form = text.get("format")
    if form is None:
        return None
    if not isinstance(form, dict) or form.get("type") not in FORMATS:
        raise _refuse('text.format must be {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", '
                      '"name": ..., "schema": {...}, "strict": ...} (or dllm\'s {"type": "grammar", "grammar": ...})',
                      "text")
    if form["type"] == "json_schema":
        spec = {key: value for key, value in form.items() if key != "type"}
        return {"type": "json_schema", "json_schema": spec}
    return form  # chat's response_format checks the rest (a 400 on text.format)


def rename_error(err: RequestError) -> RequestError:
    """A chat request's error in this endpoint's field names."""
    message = str(err)
    for chat, own in CHAT_NAMES.items():
        message = re.sub(rf"\b{re.escape(chat)}\b", own, message)
    for pattern, own in CHAT_FORMS.items():
        message = re.sub(pattern, own, message)
    param = CHAT_NAMES.get(err.param, err.param) if err.param else None
    return RequestError(message, param.split(".")[0] if param else None, err.status)


class ResponsesCall:
    """One /v1/responses request: ``parse`` (for the chat handler, off the event loop) keeps the
    request and its parsed form; ``respond`` turns the chat handler's answer into this API's."""

    def __init__(self) -> None:
        self.body: dict[str, Any] = {}
        self.parsed: ParsedRequest | None = None
        self.created = int(time.time())

    def parse(self, body: Any, parse_chat: Callable[[dict[str, Any]], ParsedRequest]) -> ParsedRequest:
        chat = chat_body(body)
        self.body = body
        try:
            self.parsed = parse_chat(chat)
        except RequestError as err:
            raise rename_error(err) from None
        return self.parsed

    def respond(self, response: Response) -> Response:
        """The chat handler's response as a Responses one (errors pass as they are)."""
        if isinstance(response, StreamingResponse):
            return StreamingResponse(self._events(response.body_iterator), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        if response.status_code != 200:
            return response
        chat = json.loads(response.body)
        choice = chat["choices"][0]
        message, finish = choice["message"], choice["finish_reason"]
        output = output_items(chat["id"], message["content"], message.get("tool_calls") or [], _status(finish))
        return JSONResponse(self.response(chat, finish, output, chat["usage"], choice["dllm"]))

    def response(self, chat: dict[str, Any], finish: str | None, output: list[dict[str, Any]],
                 usage: dict[str, int] | None = None, row: dict[str, Any] | None = None) -> dict[str, Any]:
        """The ``response`` object: in progress (``finish`` None) or finished with its ``output`` items."""
        parsed, body = self.parsed, self.body
        status = _status(finish)
        form, metadata, user = body.get("text") or {}, body.get("metadata"), body.get("user")
        return {
            "id": _resp_id(chat["id"]), "object": "response", "created_at": self.created, "status": status,
            "completed_at": int(time.time()) if status == "completed" else None, "error": None,
            "incomplete_details": {"reason": REASONS[finish]} if status == "incomplete" else None,
            "instructions": body.get("instructions"), "max_output_tokens": parsed.max_tokens,
            "metadata": metadata if isinstance(metadata, dict) else {}, "model": chat["model"], "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls") is not False, "previous_response_id": None,
            "reasoning": None, "store": False, "temperature": parsed.config.temperature,
            "text": {"format": form.get("format") or {"type": "text"}},
            "tool_choice": body.get("tool_choice") or "auto",
            "tools": body.get("tools") or [], "top_p": parsed.config.top_p if parsed.config.top_p is not None else 1.0,
            "truncation": "disabled", "user": user if isinstance(user, str) else None, "background": False,
            "usage": _usage(usage) if usage else None, "dllm": {**chat.get("dllm", {}), **(row or {})},
        }

    async def _events(self, chunks: AsyncIterator[str]) -> AsyncIterator[str]:
        """The chat stream's chunks as Responses events: the response created and in progress, then
        the output items (``StreamedItems``: a message with a text delta per piece of final text, a
        function_call per tool call with its arguments' deltas), each added and done, then the
        response. An error event (after the headers) ends the stream as chat's does:
        ``{"error": {...}}``, which the openai client raises as APIError."""
        events = EventCounter()
        chat: dict[str, Any] | None = None
        items: StreamedItems | None = None
        finish = usage = row = None
        try:
            async for piece in chunks:
                for data in _sse_data(piece):
                    if "error" in data:
                        yield events.error(data["error"])
                        return
                    if chat is None:
                        chat, items = data, StreamedItems(data["id"], events)
                        started = self.response(chat, None, [])
                        yield events.emit("response.created", response=started) + events.emit(
                            "response.in_progress", response=started)
                    usage = data.get("usage") or usage
                    for choice in data.get("choices", []):
                        added = items.delta(choice.get("delta", {}))
                        if added:
                            yield added
                        if choice.get("finish_reason") is not None:
                            finish, row = choice["finish_reason"], choice.get("dllm")
            if items is None or finish is None:  # the client left (or the server closed): nobody to tell
                return
            final = self.response(chat, finish, output_items(chat["id"], items.content, items.calls, _status(finish)),
                                  usage, row)
            yield items.finish(final["status"]) + events.emit("response.completed", response=final)
        finally:
            close = getattr(chunks, "aclose", None)
            if close is not None:
                await close()  # the chat stream's rows are cancelled if still running


def _status(finish: str | None) -> str:
    return "in_progress" if finish is None else "incomplete" if finish in REASONS else "completed"


def _sse_data(piece: str) -> list[dict[str, Any]]:
    """The JSON bodies of the chat stream's events in ``piece`` (``[DONE]`` left out)."""
    bodies = []
    for event in piece.split("\n\n"):
        if event.startswith("data: ") and event != "data: [DONE]":
            bodies.append(json.loads(event[len("data: "):]))
    return bodies


def _resp_id(chat_id: str) -> str:
    return "resp_" + chat_id.removeprefix("chatcmpl-")


def _usage(usage: dict[str, int]) -> dict[str, Any]:
    return {"input_tokens": usage["prompt_tokens"], "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage["total_tokens"]}
