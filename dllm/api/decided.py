"""Which rows of a batch decode have a decided text: their final prefix (every position before
the first mask) already runs past ``max_tokens`` or holds a stop (``outputs.cut_answer``).

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
from dllm.engine.config import GenerationConfig


def decided_rows(lm, request: OutputRequest, config: GenerationConfig) -> Callable | None:
    """A ``Decoding.run`` reader of the rows ``request`` decided, or None when only the canvas's end
    decides them (no stop, and max_tokens fills the canvas; token editing, which may rewrite a
    committed token until its window ends)."""
    stops, max_tokens = request.stops, request.max_tokens
    if config.edit_threshold is not None:
        return None
    if not (stops.strings or stops.token_ids) and (max_tokens is None or max_tokens >= config.gen_length):
        return None
    mask_id, eos = lm.model.mask_token_id, lm.model.eos_token_ids

    def text_of(ids: list[int]) -> str:
        return lm.tokenizer.decode(ids, skip_special_tokens=False)

    has_stops = bool(stops.strings or stops.token_ids)

    def decided(decoding) -> Tensor:
        active = decoding.state.runner.active
        out = []
        for row, live in zip(decoding.answer().tolist(), active.tolist()):
            final = row[: row.index(mask_id)] if mask_id in row else row
            could_end = live and (has_stops or len(final) > max_tokens)
            out.append(bool(could_end) and cut_answer(final, text_of, eos, stops, max_tokens,
                                                      complete=False).finish_reason in ("stop", "length"))
        return torch.tensor(out, dtype=torch.bool, device=active.device)

    return decided
