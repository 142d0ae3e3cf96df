"""What lm-eval's generation kwargs mean for a diffusion decode: stop strings and lengths.

Kept small and local to evaluation; the generate API may grow the same notions, and these
then become calls to it.
"""
from __future__ import annotations

from typing import Sequence


def cut_at_stop(text: str, until: str | Sequence[str] | None) -> str:
    """``text`` up to (not including) the earliest occurrence of any stop string.

    A diffusion model writes the whole answer at once, so stop strings are applied to the
    finished text: the cut is at the first place any of them starts, as an autoregressive
    decoder that stopped there would have returned.
    """
    if until is None:
        return text
    stops = [until] if isinstance(until, str) else list(until)
    for stop in stops:
        if not isinstance(stop, str):
            raise TypeError(f"stop strings must be strings, got {stop!r}")
    cuts = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return text[: min(cuts)] if cuts else text


def block_aligned_length(max_tokens: int, block_length: int) -> int:
    """The shortest gen_length that holds ``max_tokens`` and is a multiple of ``block_length``."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_gen_toks must be a positive integer, got {max_tokens!r}")
    return -(-max_tokens // block_length) * block_length
