"""Tensor-parallel serving: rank 0's scheduler decides, every rank steps the same batches.

Under ``torchrun --nproc_per_node N dllm serve --tensor-parallel N`` each rank holds 1/N of the
model, so every forward needs every rank, with the same canvas. Rank 0 alone runs the HTTP front
and the real ``BatchScheduler`` (``LeaderScheduler``): what the batch is at each step (which
requests start a batch or join one, which rows are cancelled, which batch fails or when the
server stops) depends on arrival times and measured round costs, so only rank 0 decides it, and
it broadcasts each decision (a ``BatchOp``) right before acting on it. The other ranks
(``follow``) apply the same operations to the same ``RunningBatch`` code in the same order; a
running batch is deterministic given them, so every rank's canvas, caches and collectives stay in
step without broadcasting tokens.

Cancellation is the one input that arrives between decisions (a client goes away): rank 0 records it and marks the row at the top of the next loop pass, and the step
operation carries the batch's marked rows, so every rank stops them at the same round. A stop
is no input: every rank reads it in its own canvas (``answer_decoder``) in the same round.

Operations travel on a gloo group of their own (CPU objects, whatever the model's backend),
created with a long timeout: the other ranks wait in it while the server is idle.
"""
from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import Callable

import torch.distributed as dist

from dllm.cache.prompt_store import PromptKVStore
from dllm.serve.protocol import SchedulerLimits, ServeRequest
from dllm.api.decided import answer_decoder
from dllm.serve.running_batch import RowProgress, RunningBatch, batch_key
from dllm.serve.scheduler import BatchScheduler

log = logging.getLogger(__name__)
IDLE_TIMEOUT = datetime.timedelta(days=3650)  # a server may sit idle; torchrun ends the job if a rank dies

LAUNCH, STEP, JOIN, DROP, STOP = "launch", "step", "join", "drop", "stop"


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchOp:
    """One scheduler decision: start batch ``batch`` with ``requests`` (launch), step it once after
    marking ``cancelled`` rows (step), rebuild it at a block boundary with ``requests`` joining
    (join), forget it after a failure (drop), or end (stop)."""

    kind: str
    batch: int = -1
    requests: tuple[ServeRequest, ...] = ()
    cancelled: tuple[str, ...] = ()
    key: str = ""


class OpChannel:
    """Rank 0 sends each ``BatchOp`` to every rank (``broadcast_object_list`` on a gloo group)."""

    def __init__(self) -> None:
        self.group = dist.new_group(backend="gloo", timeout=IDLE_TIMEOUT)  # collective: every rank, same point

    def send(self, op: BatchOp) -> None:
        dist.broadcast_object_list([op], src=0, group=self.group)

    def receive(self) -> BatchOp:
        box: list[BatchOp | None] = [None]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]


class LeaderScheduler(BatchScheduler):
    """Rank 0's ``BatchScheduler``: the same decisions, each sent on ``channel`` before it acts."""

    def __init__(self, lm, limits: SchedulerLimits | None, channel: OpChannel) -> None:
        self.channel = channel
        self._numbers: dict[RunningBatch, int] = {}  # running batch -> its number on every rank
        self._launched = 0
        self._cancels: set[str] = set()  # asked for since the loop's last pass
        super().__init__(lm, limits)  # starts the loop thread

    def cancel(self, request_id: str) -> None:
        """Recorded now, marked at the top of the loop's next pass (see the module docstring)."""
        with self._cond:
            if request_id in self._ids:
                self._cancels.add(request_id)
                self._cond.notify()

    def _drop_cancelled_waiting(self):
        for request_id in self._cancels:  # the caller holds the lock
            row = self._ids.get(request_id)
            if row is not None:
                row.cancelled = True
        self._cancels.clear()
        return super()._drop_cancelled_waiting()

    def _launch(self, rows: list[RowProgress], key: str) -> None:
        number, self._launched = self._launched, self._launched + 1
        log.debug("batch %d: starts on every rank with %d row(s)", number, len(rows))
        self._numbers = {b: n for b, n in self._numbers.items() if b in self._batches}
        self.channel.send(BatchOp(kind=LAUNCH, batch=number, requests=tuple(r.request for r in rows), key=key))
        before = len(self._batches)
        super()._launch(rows, key)
        if len(self._batches) > before:
            self._numbers[self._batches[-1]] = number

    def _step(self, batch: RunningBatch) -> None:
        cancelled = tuple(r.request.request_id for r in batch.rows if r.cancelled and not r.finished)
        self.channel.send(BatchOp(kind=STEP, batch=self._numbers[batch], cancelled=cancelled))
        super()._step(batch)

    def _joiners(self, batch: RunningBatch) -> list[RowProgress]:
        rows = super()._joiners(batch)
        if rows:
            log.debug("batch %d: %d row(s) join every rank's copy", self._numbers[batch], len(rows))
        self.channel.send(BatchOp(kind=JOIN, batch=self._numbers[batch], requests=tuple(r.request for r in rows)))
        return rows

    def _fail_batch(self, batch: RunningBatch, error: Exception) -> None:
        number = self._numbers.pop(batch, None)
        if number is not None:
            self.channel.send(BatchOp(kind=DROP, batch=number))
        super()._fail_batch(batch, error)

    def _shutdown(self) -> None:
        super()._shutdown()
        self.channel.send(BatchOp(kind=STOP))


def follow(lm, limits: SchedulerLimits | None, channel: OpChannel) -> None:
    """A rank other than 0: apply rank 0's operations to its own batches until it stops. A batch
    whose operation raises is dropped, as rank 0 drops it (the same code fails the same way)."""
    model, text_of = getattr(lm, "model", lm), answer_decoder(lm)
    limits = limits or SchedulerLimits()
    store = PromptKVStore(limits.prompt_cache_bytes) if limits.prompt_cache_bytes else None
    batches: dict[int, RunningBatch] = {}
    while (op := channel.receive()).kind != STOP:
        try:
            _apply(op, model, batches, store, text_of)
        except Exception:  # noqa: BLE001  rank 0 ends these rows with the error; this rank goes on
            log.debug("batch %d failed on this rank", op.batch, exc_info=True)
            batches.pop(op.batch, None)


def _apply(op: BatchOp, model, batches: dict[int, RunningBatch], store: PromptKVStore | None,
           text_of: Callable[[list[int]], str] | None = None) -> None:
    if op.kind == LAUNCH:
        config = op.requests[0].config
        batches[op.batch] = RunningBatch(model, _rows(op.requests), config, op.key, batch_key(config, model)[1],
                                         prompt_store=store, text_of=text_of)
    elif op.kind == STEP:
        batch = batches[op.batch]
        for row in batch.rows:
            row.cancelled = row.cancelled or row.request.request_id in op.cancelled
        batch.cancel_marked()
        if not batch.at_boundary():
            batch.step()
    elif op.kind == JOIN:
        batch = batches[op.batch]
        batch.next_block(_rows(op.requests))
        if batch.done:
            del batches[op.batch]
    elif op.kind == DROP:
        batches.pop(op.batch, None)


def _rows(requests: tuple[ServeRequest, ...]) -> list[RowProgress]:
    return [RowProgress(request=r, on_update=_ignore, submitted=0.0) for r in requests]


def _ignore(_update) -> None:
    pass
