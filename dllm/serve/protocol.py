"""What the server and the load generator ask of a scheduler, and what it answers.

The scheduler owns the model and runs the decode loop in its own thread; callers submit
requests and receive ``RowUpdate``s through a callback (called from the scheduler's thread:
bridge to asyncio with ``loop.call_soon_threadsafe``). A caller cuts each row's text at its
stops (``dllm.api.stops``); the scheduler stops a row in the round a stop decides its text
(``ServeRequest.stops``), as ``generate`` and ``stream`` stop theirs: a cancel from the
caller would land a round or two late.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Callable

from dllm.api.stops import StopConditions
from dllm.engine.config import GenerationConfig
from dllm.engine.logprobs import TokenLogprob
from dllm.samplers.constraints import RowConstraint


@dataclass(kw_only=True, slots=True)
class ServeRequest:
    """One row to decode: its prompt ids, its validated config and its own sampling seed
    (``n`` samples of one prompt are ``n`` requests with distinct seeds); ``top_logprobs``: None,
    or report each final token's log-probability (``dllm.engine.logprobs``) with this many alternatives."""

    request_id: str
    prompt_ids: list[int]
    config: GenerationConfig
    seed: int = 0
    top_logprobs: int | None = None
    constraint: RowConstraint | None = None  # response_format: the language the answer keeps to
    # the answer's token limit: the row stops in the round its final prefix runs past it with no
    # end-of-text (its text is decided), as generate and stream stop it (dllm.api.decided)
    max_tokens: int | None = None
    # the request's stops: the row stops in the round its final prefix holds one (or runs past
    # max_tokens), as generate and stream stop theirs (dllm.api.decided). Data, not a reader: a
    # tensor-parallel server sends requests to every rank, each reading with its own tokenizer
    stops: StopConditions | None = None


@dataclass(kw_only=True, slots=True)
class RowUpdate:
    """Progress of one request, sent after each forward that changed it and once at the end.

    ``final_ids``: the tokens that became final since the previous update (the row's final
    prefix grows left to right: every position before it committed). ``committed``: answer
    positions newly committed anywhere on the canvas, with their tokens (to show it filling).
    At the end, ``finished`` is True with a ``finish_reason`` ("eos", "length", "cancelled",
    "error") and ``stats`` (nfe, tpf, token_forwards, draft_rows, tokens, seconds: the row's
    own latency from admission, queued_seconds: its wait before it). ``logprobs``: one
    ``TokenLogprob`` per id of ``final_ids`` when the request asked for them."""

    request_id: str
    final_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None
    committed: dict[int, int] = field(default_factory=dict)
    finished: bool = False
    finish_reason: str | None = None
    stats: dict[str, Any] | None = None
    error: str | None = None


class QueueFullError(RuntimeError):
    """The waiting queue is at its limit; retry after ``retry_after`` seconds (HTTP 429)."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(kw_only=True, slots=True)
class SchedulerLimits:
    """max_batch: rows decoded together; max_queue: requests waiting beyond them (then 429);
    continuous: waiting rows join a running batch at its next block boundary, or start a batch
    of their own at once when that costs less (False: static batching, the batch drains before
    new rows join); forward_overhead_tokens: a forward's fixed cost in canvas tokens, which
    decides between the two (None: fitted from the rounds the scheduler times);
    prompt_cache_bytes: bound of the prompt K/V shared across requests of block-causal models
    (``dllm.cache.prompt_store``; 0: off)."""

    max_batch: int = 8
    max_queue: int = 64
    continuous: bool = True
    forward_overhead_tokens: float | None = None
    prompt_cache_bytes: int = 0


class Scheduler(abc.ABC):
    """Admits requests, decodes them in batches, reports each row's progress."""

    @abc.abstractmethod
    def submit(self, request: ServeRequest, on_update: Callable[[RowUpdate], None]) -> None:
        """Queue ``request`` (raises QueueFullError when the queue is full; ValueError for a
        request the model cannot take, before any model work)."""

    @abc.abstractmethod
    def cancel(self, request_id: str) -> None:
        """Free the request's row at the next step (a no-op for an unknown or finished id);
        it ends with finish_reason "cancelled"."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop the loop thread; requests still queued or running end as "cancelled"."""

    @property
    def max_rows_per_request(self) -> int | None:
        """The most rows one request may submit at once (its rows must all fit the waiting
        queue; None: no bound)."""
        return None

    @property
    @abc.abstractmethod
    def queue_depth(self) -> int:
        """Requests waiting for a row."""

    @property
    @abc.abstractmethod
    def running_rows(self) -> int:
        """Rows in the running batch."""
