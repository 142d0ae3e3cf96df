"""Which rows of a batch decode have a decided text: their final prefix (every position before
the first mask) already runs past ``max_tokens`` or holds a stop (``outputs.cut_answer``). With
``max_tokens`` alone it is read on the device; stops need the text, so a request with stops
reads the canvas back once a round.

The rest of such a row's canvas cannot change its text, so ``generate`` stops it there, as the
server and ``stream`` do: a row costs the forwards of its own text, and the three report the same
nfe for the same request. An end-of-text decides nothing here: ``stop_at_eos`` ends those rows
(or, off, lets them decode on) alike everywhere.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from dllm.api.outputs import cut_answer
from dllm.api.request import OutputRequest
from dllm.api.stops import StopConditions
from dllm.engine.config import GenerationConfig


def decided_rows(lm, request: OutputRequest, config: GenerationConfig) -> Callable | None:
    """A ``Decoding.run`` reader of the rows ``request`` decided, or None when only the canvas's end
    decides them (no stop, and max_tokens fills the canvas; token editing, which may rewrite a
    committed token until its window ends)."""
    stops, max_tokens = request.stops, request.max_tokens
    has_stops = bool(stops.strings or stops.token_ids)
    if config.edit_threshold is not None:
        return None
    if not has_stops and (max_tokens is None or max_tokens >= config.gen_length):
        return None
    mask_id, eos = lm.model.mask_token_id, lm.model.eos_token_ids
    if not has_stops:
        return _past_max_tokens(mask_id, eos, max_tokens)

    text_of = answer_decoder(lm)

    def decided(decoding) -> Tensor:
        active = decoding.state.runner.active
        out = []
        for row, live in zip(decoding.answer().tolist(), active.tolist()):
            out.append(live and final_prefix_decided(row[: row.index(mask_id)] if mask_id in row else row,
                                                   text_of, eos, stops, max_tokens))
        return torch.tensor(out, dtype=torch.bool, device=active.device)

    return decided


def answer_decoder(lm) -> Callable[[list[int]], str] | None:
    """``lm``'s answer ids to text as ``generate`` reads them (special tokens kept), or None for a
    bare model without a tokenizer (its rows' stops are then the caller's cancel to end)."""
    tokenizer = getattr(lm, "tokenizer", None)
    if tokenizer is None:
        return None
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=False)


def final_prefix_decided(final: list[int], text_of: Callable[[list[int]], str], eos: list[int],
                         stops: StopConditions, max_tokens: int | None) -> bool:
    """Whether a final prefix (a row's answer ids before its first mask) decides the row's text:
    a stop in it, or more than ``max_tokens`` tokens before any end (``cut_answer``'s "stop" or
    "length"). ``generate`` reads it here each round; the server's scheduler on the answer it
    already reads back each round, so neither adds a host read."""
    return cut_answer(final, text_of, eos, stops, max_tokens, complete=False).finish_reason in ("stop", "length")


def _past_max_tokens(mask_id: int, eos: list[int], max_tokens: int) -> Callable:
    """Without stops, on the device (no host read, so the round keeps its one read): a row is
    decided once its final prefix runs past ``max_tokens`` with no end-of-text in its first
    ``max_tokens + 1`` tokens (one there ends the text ``stop_at_eos``'s way)."""

    eos_ids: list[Tensor] = []  # copied to the device once, at the first round

    def decided(decoding) -> Tensor:
        answer = decoding.answer()
        if not eos_ids:
            eos_ids.append(torch.tensor(eos, dtype=answer.dtype, device=answer.device))
        masked = answer == mask_id
        final = torch.where(masked.any(-1), masked.int().argmax(-1), answer.shape[1])  # final prefix lengths
        ends = torch.isin(answer[:, : max_tokens + 1], eos_ids[0]).any(-1)
        return decoding.state.runner.active & (final > max_tokens) & ~ends

    return decided
