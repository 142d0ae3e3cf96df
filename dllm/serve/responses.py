"""OpenAI response bodies and SSE chunks (completions and chat), and the error body.

Each choice carries dllm's own reading in an extra ``dllm`` field: its finish reason ("eos",
"stop", "length", "cancelled", "error"), the answer's token ids as ``generate`` gives them (cut at
the stop, the ending end-of-text or stop id kept; usage counts these) and the row's
stats (nfe, tpf, seconds, ...). The response (every chunk of a stream) carries the request's seed
in a top-level ``dllm`` field: ``{"seed": S}``; sending ``seed=S`` again (same n) replays it.
OpenAI clients keep extra fields.
"""
from __future__ import annotations

import json
import time
from typing import Any

from fastapi.responses import JSONResponse

from dllm.serve.logprob_format import chat_logprobs, completion_logprobs, join_completion_logprobs
from dllm.api.tools import ToolChoice
from dllm.serve.rows import RowText
from dllm.serve.tool_stream import finish_reason


def error_body(message: str, status: int, param: str | None = None) -> dict[str, Any]:
    kind = "invalid_request_error" if 400 <= status < 500 else "server_error"
    kind = {401: "authentication_error", 429: "rate_limit_exceeded", 503: "service_unavailable"}.get(status, kind)
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def internal_error(error: Exception) -> str:
    """The message of an error never expected (a bug): what it was, and to report it."""
    return f"internal error ({type(error).__name__}: {error}); please report it"


def error_response(metrics, endpoint: str, message: str, status: int, param: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    """The JSON error response, counted in ``metrics`` (a ServerMetrics) under ``endpoint``."""
    metrics.requests.labels(endpoint=endpoint, status=str(status)).inc()
    return JSONResponse(error_body(message, status, param), status_code=status, headers=headers)


def dllm_fields(row: RowText) -> dict[str, Any]:
    return {"finish_reason": row.reason, "token_ids": row.token_ids, "stats": row.answer_stats}


def usage(prompt_tokens: int, rows: list[RowText]) -> dict[str, int]:
    completion = sum(len(row.token_ids) for row in rows)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion}


class ResponseWriter:
    """Bodies for one request of ``chat`` or completion kind, under one id and timestamp."""

    def __init__(self, chat: bool, model_name: str, request_id: str, seed: int,
                 top_logprobs: int | None = None, include_usage: bool = False, tools: ToolChoice | None = None) -> None:
        self.chat, self.model_name, self.seed, self.top_logprobs = chat, model_name, seed, top_logprobs
        self.tools = tools  # a chat request's tools: answers read back as their calls
        self.include_usage = include_usage  # stream_options.include_usage: every other chunk's usage is null
        self.running: tuple[list[int], list[RowText]] | None = None  # see ``usage_per_chunk``
        self.id = ("chatcmpl-" if chat else "cmpl-") + request_id
        self.created = int(time.time())

    def _envelope(self, object_: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": object_, "created": self.created, "model": self.model_name,
                "choices": choices, "dllm": {"seed": self.seed}}

    def logprobs(self, row: RowText, text_start: int = 0) -> dict[str, Any] | None:
        """The logprobs of ``row``'s answer tokens not handed out yet (None unless asked)."""
        if self.top_logprobs is None:
            return None
        start = row.logprobs_sent
        entries = row.take_logprobs()
        if self.chat:
            return chat_logprobs(entries, row.ids, start, row.decode)
        return completion_logprobs(entries, row.ids, start, row.decode, text_start)

    def whole(self, texts: list[str], rows: list[RowText], prompt_tokens: int,
              echoed: list[int] | None = None, prompt_logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The non-streamed response: one choice per row, ``texts`` already echoed if asked
        (``echoed``: the characters of each that are the prompt; ``prompt_logprobs``: each
        choice's echoed prompt tokens' logprobs, put before its answer's)."""
        choices = []
        for index, (text, row) in enumerate(zip(texts, rows)):
            choice: dict[str, Any] = {"index": index, "finish_reason": row.openai_finish_reason,
                                      "dllm": dllm_fields(row)}
            logprobs = self.logprobs(row, echoed[index] if echoed else 0)
            if self.chat:
                choice.update(message=self._message(text, choice), logprobs=logprobs)
            else:
                if prompt_logprobs:
                    logprobs = join_completion_logprobs(prompt_logprobs[index], logprobs)
                choice.update(text=text, logprobs=logprobs)
            choices.append(choice)
        body = self._envelope("chat.completion" if self.chat else "text_completion", choices)
        body["usage"] = usage(prompt_tokens, rows)
        return body

    def _message(self, text: str, choice: dict[str, Any]) -> dict[str, Any]:
        """The chat message of an answer; with tools, its calls (and the finish reason they give)."""
        if self.tools is None:
            return {"role": "assistant", "content": text}
        content, calls = self.tools.read(text)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = [call.openai() for call in calls]
        choice["finish_reason"] = finish_reason(self.tools, len(calls), choice["finish_reason"])
        return message

    def chunk(self, index: int, text: str | None, row: RowText | None = None, *, role: bool = False,
              logprobs: dict[str, Any] | None = None, delta: dict[str, Any] | None = None,
              tool_calls: int = 0) -> str:
        """One SSE event: new text of choice ``index`` (and its tokens' ``logprobs``), or a chat
        ``delta`` given whole (a tool stream's); with ``row``, its last (finish) chunk, after
        ``tool_calls`` calls."""
        choice: dict[str, Any] = {"index": index, "finish_reason": None}
        if self.chat:
            delta = dict(delta or {})
            if role:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            choice.update(delta=delta, logprobs=logprobs)
        else:
            choice.update(text=text or "", logprobs=logprobs)
        if row is not None:
            choice["finish_reason"] = finish_reason(self.tools, tool_calls, row.openai_finish_reason)
            choice["dllm"] = dllm_fields(row)
        body = self._envelope("chat.completion.chunk" if self.chat else "text_completion", [choice])
        if self.running is not None:  # vLLM's continuous_usage_stats: this choice's usage so far
            prompts, rows = self.running
            body["usage"] = usage(prompts[index], [rows[index]])
        elif self.include_usage:  # as OpenAI documents it (and vLLM sends it): null until the last chunk
            body["usage"] = None
        return sse(body)

    def usage_per_chunk(self, prompt_tokens: list[int], rows: list[RowText]) -> None:
        """Each later chunk carries its choice's usage so far (vLLM's ``continuous_usage_stats``):
        that choice's prompt tokens (``prompt_tokens[i]``) and the answer tokens decided so far."""
        self.running = prompt_tokens, rows

    def usage_chunk(self, rows: list[RowText], prompt_tokens: int) -> str:
        body = self._envelope("chat.completion.chunk" if self.chat else "text_completion", [])
        body["usage"] = usage(prompt_tokens, rows)
        return sse(body)


def sse(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body)}\n\n"


DONE = "data: [DONE]\n\n"
