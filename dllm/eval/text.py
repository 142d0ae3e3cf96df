"""What lm-eval's generation kwargs mean for a diffusion decode, through the runtime's own
stop conditions (``dllm.api.stops``) and length mapping (``dllm.engine.config``)."""
from __future__ import annotations

from typing import Sequence

from dllm.engine.config import block_aligned_gen_length
from dllm.api.stops import StopConditions, first_stop_string


def cut_at_stop(text: str, until: str | Sequence[str] | None) -> str:
    """``text`` up to (not including) the earliest occurrence of any ``until`` string.

    A diffusion model writes the whole answer at once, so stop strings are applied to the
    finished text: the cut is where an autoregressive decoder that stopped there would have
    ended. Empty strings (some task configs carry one) stop nothing.
    """
    if until is None:
        return text
    strings = [until] if isinstance(until, str) else list(until)
    for stop in strings:
        if not isinstance(stop, str):
            raise TypeError(f"stop strings must be strings, got {stop!r}")
    cut = first_stop_string(text, StopConditions.parse([s for s in strings if s]))
    return text if cut is None else text[:cut]


def block_aligned_length(max_tokens: int, block_length: int | None) -> int:
    """The shortest gen_length that holds lm-eval's ``max_gen_toks`` in whole blocks."""
    try:
        return block_aligned_gen_length(max_tokens, block_length)
    except ValueError as err:
        raise ValueError(f"max_gen_toks: {err}") from err
