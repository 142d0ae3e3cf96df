"""Stop conditions of one request: stop strings and stop token ids, and where text ends.

A diffusion row commits tokens out of order, so stops are applied to its *final prefix* (every
position before it committed): the text up to the first stop is then the same whether it is
read at the end (``generate``) or while the canvas fills (``stream``, the server).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from dllm.validation import OptionTypeError

FINISH_REASONS = ("eos", "stop", "length")  # end-of-text, a stop string / id, the canvas ran out
REPLACEMENT = "\ufffd"  # what a tokenizer decodes an incomplete UTF-8 sequence to


@dataclass(frozen=True, slots=True)
class StopConditions:
    """Stop strings (cut before the first occurrence) and stop token ids (cut before them)."""

    strings: tuple[str, ...] = ()
    token_ids: tuple[int, ...] = ()

    @classmethod
    def parse(cls, stop: Any = None, stop_token_ids: Any = None, *, vocab_size: int | None = None) -> "StopConditions":
        """OpenAI-style ``stop`` (a string, a list of strings or None) and ``stop_token_ids``."""
        strings: Sequence[Any] = () if stop is None else [stop] if isinstance(stop, str) else stop
        if not isinstance(strings, (list, tuple)):
            raise OptionTypeError(f"stop must be a string or a list of strings, got {type(stop).__name__}")
        for s in strings:
            if not isinstance(s, str) or not s:
                raise ValueError(f"stop strings must be non-empty strings, got {s!r}")
        ids = () if stop_token_ids is None else stop_token_ids
        if not isinstance(ids, (list, tuple)):
            raise OptionTypeError(f"stop_token_ids must be a list of ints, got {type(stop_token_ids).__name__}")
        for t in ids:
            if isinstance(t, bool) or not isinstance(t, numbers.Integral):
                raise OptionTypeError(f"stop_token_ids must be ints, got {t!r}")
            if vocab_size is not None and not 0 <= t < vocab_size:
                raise ValueError(f"stop token id {t} is outside the model's vocabulary [0, {vocab_size})")
        return cls(strings=tuple(strings), token_ids=tuple(int(t) for t in ids))

    @property
    def longest(self) -> int:
        return max((len(s) for s in self.strings), default=0)


@dataclass(frozen=True, slots=True)
class StoppedText:
    """A row's answer cut at its first stop: ``ids`` kept, their ``text``, and why it ended
    (None while the prefix is not final and no stop was seen)."""

    text: str
    ids: list[int]
    finish_reason: str | None


def cut_at_stop(ids: Sequence[int], decode: Callable[[list[int]], str], eos_ids: Sequence[int],
                stops: StopConditions, *, complete: bool) -> StoppedText:
    """Cut the final prefix ``ids`` at the first end-of-text, stop token id or stop string.

    ``complete``: ``ids`` is the whole answer (no position left to commit), so reaching its end
    without a stop means "length". The earliest stop wins; an end-of-text or stop id ends the
    ids (it is not part of the text), a stop string ends the text (the ids keep the tokens
    whose text holds it: stop strings need not fall on token boundaries)."""
    ids = list(ids)
    reason = None
    ends = set(eos_ids) | set(stops.token_ids)
    cut = next((i for i, t in enumerate(ids) if t in ends), None)
    if cut is not None:
        reason = "eos" if ids[cut] in set(eos_ids) and ids[cut] not in stops.token_ids else "stop"
        ids = ids[:cut]
    text = decode(ids)
    first = first_stop_string(text, stops)
    if first is not None:
        text, reason = text[:first], "stop"
        ids = _ids_covering(ids, decode, first)
    if reason is None and complete:
        reason = "length"
    return StoppedText(text=text, ids=ids, finish_reason=reason)


def first_stop_string(text: str, stops: StopConditions) -> int | None:
    """Where the earliest stop string starts in ``text`` (None: no stop string in it)."""
    hits = [i for i in (text.find(s) for s in stops.strings) if i >= 0]
    return min(hits) if hits else None


def safe_text_length(text: str, stops: StopConditions) -> int:
    """How much of a not-yet-final ``text`` can be emitted: everything except a tail that could
    still grow into a stop string (the longest suffix that is a proper prefix of one), and then a
    trailing partial character (a multi-byte character split over tokens decodes to U+FFFD until
    its last byte is final)."""
    hold = 0
    for s in stops.strings:
        for k in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:k]):
                hold = max(hold, k)
                break
    end = len(text) - hold
    while end > 0 and text[end - 1] == REPLACEMENT:
        end -= 1
    return end


def _ids_covering(ids: list[int], decode: Callable[[list[int]], str], chars: int) -> list[int]:
    """The shortest prefix of ``ids`` whose text reaches ``chars`` characters."""
    for n in range(len(ids) + 1):
        if len(decode(ids[:n])) >= chars:
            return ids[:n]
    return ids
