"""``DiffusionLM.stream``: one update per decode round, text emitted as it becomes final.

A diffusion row commits positions in any order; its *final prefix* is every position before
its first mask. The text of that prefix (cut at end-of-text and stops, holding back a tail
that could still become a stop string or an incomplete character) only grows, and ends as
the text ``generate`` gives. The canvas drives the engine's own ``Decoding``, so the tokens
are ``generate``'s. Under token editing (``edit_threshold``) a committed token may change until
its window ends, so only positions before the active window count as final.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from dllm.engine.decoding import Decoding
from dllm.engine.logprobs import TokenLogprob
from dllm.api.outputs import cut_answer, end_row
from dllm.api.request import OutputRequest
from dllm.api.stops import safe_text_length
from dllm.api.tools import ToolCall, ToolChoice


@dataclass(kw_only=True, slots=True)
class StreamUpdate:
    """What one round changed. ``committed``: answer position -> token id committed in this
    round; ``canvas``: the answer ids (the mask id where still masked); ``final_ids`` /
    ``final_text``: the final prefix so far and its text (cut at the first end-of-text or
    stop); ``text_delta``: the final text new in this update. The last update has
    ``finished=True``, a ``finish_reason`` ("eos", "stop", "length") and ``stats`` (as
    ``generate``'s: nfe, tpf, token_forwards, draft_rows, tokens, seconds). ``in_flight``: the
    answer spans [start, end) being decoded after the round: the active block, or in the
    pipelined mode (``block_add_threshold``) every block in flight; ``pipelined`` says which.
    ``logprobs`` (when asked): one ``TokenLogprob`` per id of ``final_ids``, as they stand after the round.
    ``tool_calls`` (a stream with tools, on the last update): the calls read from ``final_text``."""

    committed: dict[int, int]
    canvas: list[int]
    final_ids: list[int]
    final_text: str
    text_delta: str
    finished: bool = False
    finish_reason: str | None = None
    stats: dict[str, Any] | None = None
    in_flight: list[tuple[int, int]] = field(default_factory=list)
    pipelined: bool = False
    logprobs: list[TokenLogprob] | None = None
    tool_calls: list[ToolCall] | None = None


def stream_decoding(lm, decoding: Decoding, request: OutputRequest,
                    tools: ToolChoice | None = None) -> Iterator[StreamUpdate]:
    """Step ``decoding`` (one row of ``lm``'s model) to its end, yielding after each round; the
    text is cut as ``generate`` cuts it (``outputs.cut_answer``: stops, ``max_tokens``); with
    ``tools``, the last update carries the calls read from its text."""
    stops = request.stops
    mask_id, eos = lm.model.mask_token_id, lm.model.eos_token_ids

    def text_of(ids: list[int]) -> str:
        return lm.tokenizer.decode(ids, skip_special_tokens=False)

    # token editing may rewrite a committed token until its window ends: only what lies before the
    # active window is final, and the row decodes to its end as generate's does (api/decided.py)
    editing = decoding.config.edit_threshold is not None
    previous = decoding.answer()[0].tolist()
    sent, reason = "", None
    while not decoding.done and reason is None:
        decoding.step()
        canvas = decoding.answer()[0].tolist()
        committed = {i: t for i, (t, was) in enumerate(zip(canvas, previous)) if was == mask_id and t != mask_id}
        previous = canvas
        end = next((i for i, t in enumerate(canvas) if t == mask_id), len(canvas))
        if editing and not decoding.done:
            end = min(end, decoding.window_start(0))
        final_ids = canvas[:end]
        cut = cut_answer(final_ids, text_of, eos, stops, request.max_tokens, complete=False)
        reason = cut.finish_reason
        text = cut.text if reason else cut.text[: safe_text_length(cut.text, stops)]
        if reason in ("stop", "length") and not editing:  # the rest of the canvas cannot change the text
            decoding.stop_rows(torch.ones(1, dtype=torch.bool, device=decoding.state.tokens.device))
        delta, sent = (text[len(sent):], text) if len(text) > len(sent) else ("", sent)
        logprobs = None if request.logprobs is None else decoding.state.logprobs.read(0, 0, end, request.logprobs)
        yield StreamUpdate(committed=committed, canvas=canvas, final_ids=final_ids, final_text=sent, text_delta=delta,
                           in_flight=blocks_in_flight(decoding), pipelined=hasattr(decoding.strategy, "blocks_in_flight"),
                           logprobs=logprobs)
    while not decoding.done:  # text final at end-of-text: the rest runs as in generate
        decoding.step()
    last = _last(lm, decoding, request, sent, text_of)
    if tools is not None:
        last.tool_calls = tools.read(last.final_text)[1]
    yield last


def blocks_in_flight(decoding: Decoding, row: int = 0) -> list[tuple[int, int]]:
    """Answer spans [start, end) of ``row``'s blocks being decoded (as ``answer()`` numbers its
    positions: from the row's answer start); none once the decode is done."""
    if decoding.done:
        return []
    state = decoding.state
    P = state.canvas.prompt_width
    if hasattr(decoding.strategy, "blocks_in_flight"):  # the pipelined mode
        spans = decoding.strategy.blocks_in_flight(state, row)
    else:
        spans = [(state.bs - P, state.be - P)]
    lead = int(state.lead[row]) if state.lead is not None else 0
    return [(max(s - lead, 0), e - lead) for s, e in spans if e > lead]


def _last(lm, decoding: Decoding, request: OutputRequest, sent: str, text_of) -> StreamUpdate:
    result = decoding.result()
    canvas = result.answer[0].tolist()
    mask_id = lm.model.mask_token_id  # masks are left only when a stop ended the decode early
    answer = canvas[: canvas.index(mask_id)] if mask_id in canvas else canvas
    cut, kept = end_row(answer, text_of, lm.model.eos_token_ids, request)
    nfe = int(result.nfe[0])
    stats = {"nfe": nfe, "tokens": len(kept), "tpf": len(kept) / max(nfe, 1),
             "token_forwards": int(result.token_forwards[0]), "draft_rows": int(result.draft_rows[0]),
             "seconds": result.row_seconds[0], **({} if result.edits is None else {"edits": int(result.edits[0])})}
    logprobs = None if request.logprobs is None else result.logprobs.read(0, 0, len(kept), request.logprobs)
    return StreamUpdate(committed={}, canvas=canvas, final_ids=kept, final_text=cut.text,
                        text_delta=cut.text[len(sent):], finished=True, finish_reason=cut.finish_reason, stats=stats,
                        logprobs=logprobs)

