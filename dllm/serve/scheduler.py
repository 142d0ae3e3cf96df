"""BatchScheduler: one loop thread decodes the running batches one round at a time.

Requests wait in one queue per batch key (``running_batch.batch_key``: what must be equal in a
batch; prompt, seed, gen_length and stops may differ). With ``continuous`` batching, waiting
requests of the running key never wait for a batch to drain: at a running batch's next block
boundary they join it, or, when sharing its canvas costs more than a forward of their own
(``round_cost``: rows at different stages pad each other), they start a batch of their own at
once, and the batches step in turns, one round each. Without ``continuous`` (static batching)
one batch runs and waiting requests start when it has drained. Finished and cancelled rows stop
costing forwards at once and leave at the next boundary. Keys take turns: while other keys
wait, the running key admits at most ``max_batch`` more rows, then drains, and the key waiting
longest runs next.
"""
from __future__ import annotations

import collections
import functools
import logging
import threading
import time
from typing import Callable

from dllm.cache.prompt_store import PromptKVStore
from dllm.engine.config import GenerationConfig
from dllm.engine.decoding import check_seeds
from dllm.api.inputs import check_token_ids
from dllm.serve.budget import CanvasSize, fits, rows_that_fit
from dllm.serve.drain_rate import DrainRate
from dllm.serve.protocol import QueueFullError, RowUpdate, Scheduler, SchedulerLimits, ServeRequest
from dllm.serve.round_cost import RoundCost, join_pays, round_tokens
from dllm.api.decided import answer_decoder
from dllm.serve.running_batch import RowProgress, RunningBatch, batch_key

log = logging.getLogger(__name__)


class BatchScheduler(Scheduler):
    """Continuous (or static) batching over one loaded model (a ``DiffusionLM`` or its model)."""

    def __init__(self, lm, limits: SchedulerLimits | None = None) -> None:
        self.model = getattr(lm, "model", lm)
        self.text_of = answer_decoder(lm)  # to stop rows at their stop strings
        self.limits = limits or SchedulerLimits()
        if self.limits.max_batch <= 0 or self.limits.max_queue < 0:
            raise ValueError(f"max_batch must be positive and max_queue >= 0, got {self.limits}")
        self._cond = threading.Condition()
        self._queues: dict[str, collections.deque[RowProgress]] = {}  # by batch key
        self._ids: dict[str, RowProgress] = {}
        self._batches: list[RunningBatch] = []  # all of one key, stepped in turns
        self._admitted = 0  # rows the running key admitted after its first batch (a bounded turn)
        self.cost = RoundCost(fixed_tokens=self.limits.forward_overhead_tokens)
        # prompt blocks shared across requests (block-causal models under a block cache)
        self.prompt_store = PromptKVStore(self.limits.prompt_cache_bytes) if self.limits.prompt_cache_bytes else None
        self._closed = False
        self._drain = DrainRate()  # rows finished per second of decoding: Retry-After
        self._thread = threading.Thread(target=self._loop, name="dllm-scheduler", daemon=True)
        self._thread.start()

    # --- the protocol -----------------------------------------------------------------------
    def submit(self, request: ServeRequest, on_update: Callable[[RowUpdate], None]) -> None:
        self._check(request)
        key, _ = batch_key(request.config, self.model)
        with self._cond:
            if self._closed:
                raise RuntimeError("the scheduler is closed")
            if request.request_id in self._ids:
                raise ValueError(f"request id {request.request_id!r} is already queued or running")
            if self.queue_depth >= self.limits.max_queue:
                raise QueueFullError(f"{self.queue_depth} requests are waiting (max_queue "
                                     f"{self.limits.max_queue}); retry later", self._retry_after())
            row = RowProgress(request=request, on_update=on_update, submitted=time.perf_counter())
            self._queues.setdefault(key, collections.deque()).append(row)
            self._ids[request.request_id] = row
            self._cond.notify()

    def cancel(self, request_id: str) -> None:
        with self._cond:
            row = self._ids.get(request_id)
            if row is not None:
                row.cancelled = True
                self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()

    @property
    def max_rows_per_request(self) -> int:
        return self.limits.max_queue

    @property
    def queue_depth(self) -> int:
        return sum(len(q) for q in self._queues.values())

    @property
    def running_rows(self) -> int:
        return sum(len(batch.live) for batch in list(self._batches))

    @property
    def decoding(self) -> bool:
        """Whether a batch is decoding (rows that all ended, cancelled ones too, leave none)."""
        return bool(self._batches)

    # --- checks before any model work ---------------------------------------------------------
    def _check(self, request: ServeRequest) -> None:
        if not isinstance(request, ServeRequest):
            raise TypeError(f"submit takes a ServeRequest, got {type(request).__name__}")
        if not isinstance(request.config, GenerationConfig):
            raise TypeError(f"request.config must be a GenerationConfig, got {type(request.config).__name__}")
        check_token_ids([request.prompt_ids], self.model.config.vocab_size)
        check_seeds([request.seed], 1)
        if not request.prompt_ids:
            raise ValueError("the prompt is empty; a request needs at least one token")
        total = len(request.prompt_ids) + request.config.gen_length
        if total > self.model.config.max_sequence_length:
            raise ValueError(f"the prompt has {len(request.prompt_ids)} tokens + gen_length "
                             f"{request.config.gen_length} = {total} > the model's context of "
                             f"{self.model.config.max_sequence_length}; shorten the prompt or lower max_tokens")
        if not fits(self.model, [(1, total)], request.config):
            raise ValueError(f"one row of {len(request.prompt_ids)} prompt tokens + {request.config.gen_length} "
                             f"answer positions does not fit memory_budget_mb {request.config.memory_budget_mb:g} "
                             "even alone; lower max_tokens, shorten the prompt or raise memory_budget_mb")

    def _retry_after(self) -> float:
        """Seconds for the queue to drain at the rate rows finished recently."""
        return self._drain.drain_seconds(self.queue_depth)

    # --- the loop thread ----------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._batches and not self.queue_depth:
                    self._cond.wait()
                if self._closed:
                    break
                dropped = self._drop_cancelled_waiting()
            self._send(dropped)
            if not self._batches:
                self._start_batch()
            for batch in list(self._batches):
                try:
                    self._step(batch)
                except Exception as error:  # a failed batch ends its rows, the server goes on
                    log.exception("batch failed")
                    self._fail_batch(batch, error)
                if batch.done and batch in self._batches:
                    self._batches.remove(batch)
            if self._batches:
                self._start_side_batch()
        self._shutdown()

    def _step(self, batch: RunningBatch) -> None:
        updates = batch.cancel_marked()
        if not batch.at_boundary():  # stopping rows may have ended the block: rebuild first
            tokens, start = round_tokens(batch.shapes(), batch.config), time.perf_counter()
            updates += batch.step()
            if tokens:
                self.cost.observe(tokens, time.perf_counter() - start)
        self._send(updates)
        if batch.at_boundary():
            batch.next_block(self._joiners(batch))

    def _start_batch(self) -> None:
        with self._cond:
            key = self._next_key()
            if key is None:
                return
            queue = self._queues[key]
            head = [(len(r.prefix), r.remaining) for r in list(queue)[: self.limits.max_batch]]
            rows = self._take(key, max(1, rows_that_fit(self.model, [], [], head, queue[0].request.config)))
        self._admitted = 0
        self._launch(rows, key)

    def _launch(self, rows: list[RowProgress], key: str) -> None:
        config = rows[0].request.config
        try:
            self._batches.append(RunningBatch(self.model, rows, config, key, batch_key(config, self.model)[1],
                                              prompt_store=self.prompt_store, text_of=self.text_of))
        except Exception as error:  # e.g. over the memory budget: these rows end, others go on
            self._end(rows, "error", str(error))

    def _room(self, key: str) -> int:
        """Rows of ``key`` that may be admitted now (the caller holds the lock)."""
        room = self.limits.max_batch - self.running_rows
        if any(k != key for k in self._queues):  # others wait: a bounded turn
            room = min(room, self.limits.max_batch - self._admitted)
        return max(room, 0)

    def _joinable(self) -> bool:
        return self.limits.continuous and bool(self._batches) and self._batches[0].joinable

    def _joiners(self, batch: RunningBatch) -> list[RowProgress]:
        """Rows that join ``batch`` at this boundary (continuous batching only): the waiting
        rows of its key, when sharing its canvas costs less than a batch of their own."""
        if not self._joinable() or not batch.can_rebuild():
            return []
        with self._cond:
            queue = self._queues.get(batch.key)
            if not queue:
                return []
            waiting = self._within_budget(batch.shapes(), list(queue)[: self._room(batch.key)], exclude=batch)
            if not waiting:
                return []
            if not join_pays(batch.shapes(), [(len(r.prefix), r.remaining) for r in waiting],
                             self.cost.overhead_tokens, functools.partial(round_tokens, config=batch.config)):
                return []
            rows = self._take(batch.key, len(waiting))
            self._admitted += len(rows)
            return rows

    def _start_side_batch(self) -> None:
        """Continuous batching: start the waiting rows of the running key in a batch of their
        own now, unless joining a running batch at its next boundary costs less."""
        if not self._joinable():
            return
        key = self._batches[0].key
        with self._cond:
            queue = self._queues.get(key)
            if not queue:
                return
            waiting = self._within_budget([], list(queue)[: self._room(key)])
            if not waiting:
                return
            shapes = [(len(r.prefix), r.remaining) for r in waiting]
            overhead = self.cost.overhead_tokens
            price = functools.partial(round_tokens, config=self._batches[0].config)
            if any(join_pays(b.shapes(b.block + 1), shapes, overhead, price) for b in self._batches if not b.done):
                return  # a running batch takes them at its next boundary
            rows = self._take(key, len(waiting))
            self._admitted += len(rows)
        self._launch(rows, key)

    def _within_budget(self, base: list[tuple[int, int]], waiting: list[RowProgress],
                       exclude: RunningBatch | None = None) -> list[RowProgress]:
        """The first of ``waiting`` that fit ``memory_budget_mb`` on one canvas with rows of the
        ``base`` shapes while the other running batches (all but ``exclude``) decode, so that no
        batch fails its memory check once running."""
        if not waiting:
            return waiting
        shapes = [(len(r.prefix), r.remaining) for r in waiting]
        others: list[CanvasSize] = [b.canvas_size() for b in self._batches if b is not exclude and not b.done]
        return waiting[: rows_that_fit(self.model, others, base, shapes, waiting[0].request.config)]

    def _next_key(self) -> str | None:
        """The key whose first waiting request has waited longest."""
        heads = [(q[0].submitted, key) for key, q in self._queues.items() if q]
        return min(heads)[1] if heads else None

    def _take(self, key: str, count: int) -> list[RowProgress]:
        queue = self._queues[key]
        rows = [queue.popleft() for _ in range(min(count, len(queue)))]
        if not queue:
            del self._queues[key]
        return rows

    def _drop_cancelled_waiting(self) -> list[tuple[RowProgress, RowUpdate]]:
        dropped = []
        for key in list(self._queues):
            queue = self._queues[key]
            for row in [r for r in queue if r.cancelled]:
                queue.remove(row)
                row.finished = True
                dropped.append((row, RowUpdate(request_id=row.request.request_id, finished=True,
                                               finish_reason="cancelled",
                                               stats={"seconds": 0.0,
                                                      "queued_seconds": time.perf_counter() - row.submitted})))
            if not queue:
                del self._queues[key]
        return dropped

    def _send(self, updates: list[tuple[RowProgress, RowUpdate]]) -> None:
        for row, update in updates:
            if update.finished:
                with self._cond:
                    self._ids.pop(row.request.request_id, None)
                self._drain.finished((update.stats or {}).get("seconds", 0.0))  # a row that never decoded: 0 s, not counted
            try:
                row.on_update(update)
            except Exception:  # a caller's callback must not stop the other rows
                log.exception("on_update of request %s failed", row.request.request_id)

    def _fail_batch(self, batch: RunningBatch, error: Exception) -> None:
        if batch in self._batches:
            self._batches.remove(batch)
        self._end(batch.live, "error", str(error))

    def _shutdown(self) -> None:
        with self._cond:
            waiting = [r for q in self._queues.values() for r in q]
            self._queues.clear()
        running = [row for batch in self._batches for row in batch.live]
        self._batches = []
        self._end(running + waiting, "cancelled")

    def _end(self, rows: list[RowProgress], reason: str, error: str | None = None) -> None:
        ended = []
        for row in rows:
            row.finished = True
            ended.append((row, RowUpdate(request_id=row.request.request_id, finished=True, finish_reason=reason,
                                         error=error, stats={"seconds": 0.0, "queued_seconds": 0.0})))
        self._send(ended)
