"""OpenAI response bodies and SSE chunks (completions and chat), and the error body.

Each choice carries dllm's own reading in an extra ``dllm`` field: its finish reason ("eos",
"stop", "length", "cancelled", "error"), the answer's token ids as ``generate`` gives them (cut at
the stop, the ending end-of-text or stop id kept; usage counts these) and the row's
stats (nfe, tpf, seconds, ...). OpenAI clients keep extra fields.
"""
from __future__ import annotations

import json
import time
from typing import Any

from dllm.serve.rows import RowText


def error_body(message: str, status: int, param: str | None = None) -> dict[str, Any]:
    kind = {400: "invalid_request_error", 404: "invalid_request_error", 429: "rate_limit_exceeded",
            503: "service_unavailable"}.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def dllm_fields(row: RowText) -> dict[str, Any]:
    return {"finish_reason": row.reason, "token_ids": row.token_ids, "stats": row.stats}


def usage(prompt_tokens: int, rows: list[RowText]) -> dict[str, int]:
    completion = sum(len(row.token_ids) for row in rows)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion}


class ResponseWriter:
    """Bodies for one request of ``chat`` or completion kind, under one id and timestamp."""

    def __init__(self, chat: bool, model_name: str, request_id: str) -> None:
        self.chat, self.model_name = chat, model_name
        self.id = ("chatcmpl-" if chat else "cmpl-") + request_id
        self.created = int(time.time())

    def _envelope(self, object_: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": object_, "created": self.created, "model": self.model_name,
                "choices": choices}

    def whole(self, texts: list[str], rows: list[RowText], prompt_tokens: int) -> dict[str, Any]:
        """The non-streamed response: one choice per row, ``texts`` already echoed if asked."""
        choices = []
        for index, (text, row) in enumerate(zip(texts, rows)):
            choice: dict[str, Any] = {"index": index, "finish_reason": row.openai_finish_reason,
                                      "dllm": dllm_fields(row)}
            if self.chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice.update(text=text, logprobs=None)
            choices.append(choice)
        body = self._envelope("chat.completion" if self.chat else "text_completion", choices)
        body["usage"] = usage(prompt_tokens, rows)
        return body

    def chunk(self, index: int, text: str | None, row: RowText | None = None, *, role: bool = False) -> str:
        """One SSE event: new text of choice ``index``; with ``row``, its last (finish) chunk."""
        choice: dict[str, Any] = {"index": index, "finish_reason": None}
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant"} if role else {}
            if text is not None:
                delta["content"] = text
            choice["delta"] = delta
        else:
            choice.update(text=text or "", logprobs=None)
        if row is not None:
            choice["finish_reason"] = row.openai_finish_reason
            choice["dllm"] = dllm_fields(row)
        return sse(self._envelope("chat.completion.chunk" if self.chat else "text_completion", [choice]))

    def usage_chunk(self, rows: list[RowText], prompt_tokens: int) -> str:
        body = self._envelope("chat.completion.chunk" if self.chat else "text_completion", [])
        body["usage"] = usage(prompt_tokens, rows)
        return sse(body)


def sse(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body)}\n\n"


DONE = "data: [DONE]\n\n"
