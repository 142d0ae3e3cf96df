"""Answer tokens' log-probabilities in OpenAI's two shapes (and an echoed prompt's, completions only).

Each entry is the log-probability of an answer token under the forward that committed it
(``dllm.engine.logprobs``), with the most likely tokens of that same distribution; one entry per id of
the choice's ``dllm.token_ids`` (so an ending end-of-text or stop id has one too), in position
order. Completions: ``{"tokens", "token_logprobs", "top_logprobs", "text_offset"}``, each
``top_logprobs`` entry the token itself and then the ``logprobs`` most likely ones (up to
``logprobs + 1`` entries, so ``logprobs: 0`` gives the token alone), as OpenAI's reference and vLLM
give them; chat: ``{"content": [{"token", "logprob", "bytes", "top_logprobs"}]}`` (``top_logprobs``
exactly the ``top_logprobs`` most likely). A value the engine could not record is null.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from dllm.engine.logprobs import TokenLogprob

Decode = Callable[[list[int]], str]


def completion_logprobs(entries: list[TokenLogprob], ids: list[int], start: int, decode: Decode,
                        text_start: int = 0) -> dict[str, Any]:
    """Entries for answer positions ``start, start + 1, ...`` of ``ids``; ``text_start``: where
    the answer's text begins in the choice's text (after an echoed prompt)."""
    positions = range(start, start + len(entries))
    tokens = [decode([ids[p]]) for p in positions]
    return {
        "tokens": tokens,
        "token_logprobs": [_number(e.logprob) for e in entries],
        "top_logprobs": [_with_token(token, e, decode) for token, e in zip(tokens, entries)],
        "text_offset": [text_start + len(decode(ids[:p])) for p in positions],
    }


def prompt_completion_logprobs(entries: list[TokenLogprob], ids: list[int], decode: Decode) -> dict[str, Any]:
    """An echoed prompt's entries (``prompt_logprobs``) in the completion shape: its first
    token's logprob and top_logprobs null, as OpenAI and vLLM give them."""
    out = completion_logprobs(entries, ids, 0, decode, 0)
    if entries:
        out["top_logprobs"][0] = None
    return out


def _with_token(token: str, entry: TokenLogprob, decode: Decode) -> dict[str, float | None]:
    """The token's own logprob first, then its alternatives (the token once if among them)."""
    out = {token: _number(entry.logprob)}
    for t, value in entry.top:
        out.setdefault(decode([t]), _number(value))
    return out


def join_completion_logprobs(first: dict[str, Any] | None, then: dict[str, Any] | None) -> dict[str, Any] | None:
    """Two spans of a choice in the completion shape (the prompt's, then the answer's) as one."""
    if first is None or then is None:
        return first or then
    return {key: None if first[key] is None else first[key] + then[key] for key in first}


def chat_logprobs(entries: list[TokenLogprob], ids: list[int], start: int, decode: Decode) -> dict[str, Any]:
    content = []
    for p, entry in zip(range(start, start + len(entries)), entries):
        item = _token(decode([ids[p]]), entry.logprob)
        item["top_logprobs"] = [_token(decode([t]), v) for t, v in entry.top]
        content.append(item)
    return {"content": content, "refusal": None}


def _token(text: str, logprob: float) -> dict[str, Any]:
    return {"token": text, "logprob": _number(logprob), "bytes": list(text.encode("utf-8", "replace"))}


def _number(value: float) -> float | None:
    return value if math.isfinite(value) else None
