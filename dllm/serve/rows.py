"""One row's answer as its updates arrive: the final prefix, cut at stops and at max_tokens, and
the text that may be sent so far.

A diffusion row commits out of order; only its final prefix (every position before it committed)
is read, so the text streamed piece by piece is the text a whole response holds. A tail that
could still become a stop string, or a trailing partial character, is held back
(``safe_text_length``).
"""
from __future__ import annotations

from typing import Any, Callable

from dllm.engine.logprobs import TokenLogprob
from dllm.api.outputs import cut_answer, end_row
from dllm.api.request import OutputRequest
from dllm.serve.protocol import RowUpdate
from dllm.api.stops import FINISH_REASONS, StopConditions, StoppedText, safe_text_length


class RowText:
    """Accumulates a row's final ids (and their logprobs when asked); ``done`` once an
    end-of-text, a stop, max_tokens or the scheduler's last update ends it; ``settled`` once the
    scheduler's last update (with the row's stats) came too: a row a stop decided is cancelled and
    its stats arrive one round later."""

    def __init__(self, decode: Callable[[list[int]], str], eos_ids: list[int], stops: StopConditions,
                 max_tokens: int) -> None:
        self.decode, self.eos_ids, self.stops, self.max_tokens = decode, eos_ids, stops, max_tokens
        self.ids: list[int] = []
        self.logprobs: list[TokenLogprob] = []  # one per id of ``ids`` when the request asked
        self.logprobs_sent = 0  # entries of ``logprobs`` already handed out
        self.settled = False
        self.sent = 0  # characters of text already handed out
        self.cut = StoppedText(text="", ids=[], finish_reason=None)
        self.reason: str | None = None  # dllm's finish reason once done
        self.stats: dict[str, Any] | None = None
        self.error: str | None = None
        self._kept: list[int] | None = None  # token_ids of a row that ended by end-of-text / stop

    def end_undecoded(self) -> None:
        """A row of no answer tokens (echo with max_tokens 0): "length" at once, nothing decoded."""
        self.reason, self.settled, self.stats = "length", True, {"nfe": 0, "token_forwards": 0, "draft_rows": 0}

    @property
    def done(self) -> bool:
        return self.reason is not None

    def add(self, update: RowUpdate) -> None:
        """Take one update; afterwards ``done`` says whether the row's answer is decided."""
        if update.finished:
            self.settled = True
            if update.stats is not None:
                self.stats = update.stats
        if self.done:
            return
        self.ids += update.final_ids
        self.logprobs += update.logprobs or []
        ended = update.finished and update.finish_reason in FINISH_REASONS  # not cancelled, not failed
        self.cut = cut_answer(self.ids, self.decode, self.eos_ids, self.stops, self.max_tokens, complete=ended)
        if self.cut.finish_reason is not None:
            self.reason = self.cut.finish_reason
        elif update.finished:  # cancelled or failed before its answer was decided
            self.reason = update.finish_reason or "error"
            self.error = update.error

    @property
    def answer_stats(self) -> dict[str, Any] | None:
        """The scheduler's stats with tokens and tpf counted as ``generate`` counts them: over the
        answer's ``token_ids`` (cut at its stop or max_tokens)."""
        if self.stats is None:
            return None
        tokens = len(self.token_ids) if self.reason in FINISH_REASONS else self.stats.get("tokens", 0)
        return {**self.stats, "tokens": tokens, "tpf": tokens / max(self.stats.get("nfe", 0), 1)}

    def take_logprobs(self) -> list[TokenLogprob]:
        """Logprobs of answer tokens not handed out yet whose text has been handed out (all of the
        answer's once done), in position order."""
        if self.done:
            end = len(self.token_ids)
        else:
            end = self.logprobs_sent
            while end < len(self.cut.ids) and len(self.decode(self.cut.ids[: end + 1])) <= self.sent:
                end += 1
        piece = self.logprobs[self.logprobs_sent : end]
        self.logprobs_sent += len(piece)
        return piece

    def take_text(self) -> str:
        """Text not handed out yet that can no longer change (all of it once done)."""
        text = self.cut.text
        end = len(text) if self.done else safe_text_length(text, self.stops)
        piece = text[self.sent : max(end, self.sent)]
        self.sent += len(piece)
        return piece

    @property
    def token_ids(self) -> list[int]:
        """The answer's ids as ``generate``'s ``token_ids`` holds them: cut where the text is cut,
        the end-of-text or stop id that ended the row kept (``outputs.end_row``)."""
        if self.reason not in ("eos", "stop"):
            return list(self.cut.ids)
        if self._kept is None:  # a done row's ids no longer change: cut once
            _, self._kept = end_row(self.ids, self.decode, self.eos_ids,
                                    OutputRequest(stops=self.stops, max_tokens=self.max_tokens))
        return self._kept

    @property
    def openai_finish_reason(self) -> str | None:
        """OpenAI's reading: "stop" for an end-of-text or a stop, "length" when the answer ran out."""
        if self.reason in ("eos", "stop"):
            return "stop"
        return self.reason
