"""From a decode's answer ids to what a caller reads: each row's text cut at its first
end-of-text, stop or ``max_tokens``, why it ended, its ids and its own statistics."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from dllm.api.request import OutputRequest
from dllm.engine.logprobs import TokenLogprob
from dllm.api.stops import StopConditions, StoppedText, cut_at_stop
from dllm.api.tools import ToolCall


@dataclass(kw_only=True, slots=True)
class GenerationOutput:
    """One row per prompt (per sample with ``n`` > 1: prompt 0's samples first, then prompt 1's)."""

    texts: list[str]  # answer text up to its end (prompt text first with echo=True)
    token_ids: list[list[int]]  # answer ids up to its end, the ending end-of-text / stop id included
    finish_reasons: list[str] = field(default_factory=list)  # per row: "eos", "stop" or "length"
    stats: list[dict[str, Any]] = field(default_factory=list)  # per row: nfe, tpf, token_forwards,
    # draft_rows, tokens, seconds (the row's own time, from the decode's start to its last commit)
    decode_order: list[list[int]] = field(default_factory=list)  # forward index per answer token
    memory: dict[str, int] = field(default_factory=dict)  # dllm.engine.memory plan + kv_cache_peak_bytes
    logprobs: list[list[TokenLogprob]] | None = None  # per row, one per id of token_ids (logprobs=k asked)
    tool_calls: list[list[ToolCall]] | None = None  # per row, the calls read from its text (tools given)
    prompt_token_ids: list[list[int]] = field(default_factory=list)  # per row, the ids the model read (chat
    # template included; vLLM's prompt_token_ids): the prompt side of a usage count


def cut_answer(ids: Sequence[int], decode: Callable[[list[int]], str], eos_ids: Sequence[int],
               stops: StopConditions, max_tokens: int | None, *, complete: bool) -> StoppedText:
    """An answer's final prefix ``ids`` as ``generate`` reads it: cut at the first end-of-text,
    stop id or stop string; when what that keeps is longer than ``max_tokens``, cut at
    ``max_tokens`` instead ("length"), so an answer of exactly ``max_tokens`` tokens keeps its
    own reason. ``complete``: ``ids`` is the whole answer; a prefix that runs past
    ``max_tokens`` is decided either way (the server and ``stream`` read prefixes as they grow)."""
    stopped = cut_at_stop(ids, decode, eos_ids, stops, complete=complete)
    if max_tokens is not None and len(stopped.ids) > max_tokens:
        stopped = cut_at_stop(list(ids)[:max_tokens], decode, eos_ids, stops, complete=True)
    return stopped


def end_row(answer: Sequence[int], decode: Callable[[list[int]], str], eos_ids: Sequence[int],
            request: OutputRequest) -> tuple[StoppedText, list[int]]:
    """A finished row's text, finish reason and kept ids (the ending end-of-text / stop id
    included, as in ``token_ids``), cut by ``cut_answer``."""
    answer = list(answer)
    stopped = cut_answer(answer, decode, eos_ids, request.stops, request.max_tokens, complete=True)
    kept = list(stopped.ids)
    ends = set(eos_ids) | set(request.stops.token_ids)
    after = len(kept)
    if (stopped.finish_reason in ("eos", "stop") and after < len(answer) and answer[after] in ends
            and decode(kept) == stopped.text and (request.max_tokens is None or after < request.max_tokens)):
        kept.append(answer[after])  # the token that ended the row, not a stop string's
    return stopped, kept
