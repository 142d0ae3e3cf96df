"""One HTTP request's rows on the scheduler: submit them, turn the scheduler thread's updates into
asyncio events, cut each row at its stops, and cancel what is no longer wanted."""
from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import AsyncIterator

from dllm.serve.metrics import ServerMetrics
from dllm.serve.protocol import QueueFullError, RowUpdate, Scheduler, ServeRequest
from dllm.serve.requests import ParsedRequest
from dllm.api.decided import answer_decoder
from dllm.serve.rows import RowText


@dataclass(slots=True)
class RowEvent:
    """New final text of choice ``index``; ``finished`` when its answer is decided."""

    index: int
    text: str
    finished: bool


class RowSession:
    """The rows of one request: prompt p's sample j is choice ``p * n + j``."""

    def __init__(self, parsed: ParsedRequest, model, scheduler: Scheduler, metrics: ServerMetrics) -> None:
        self.parsed, self.scheduler, self.metrics = parsed, scheduler, metrics
        self.id = uuid.uuid4().hex
        self.started = time.perf_counter()
        self.first_token: float | None = None
        decode = answer_decoder(model)
        eos, stops = list(model.model.eos_token_ids), parsed.stops
        self.requests: list[ServeRequest] = []
        self.rows: list[RowText] = []
        for p, ids in enumerate(parsed.prompt_ids):
            for j, seed in enumerate(parsed.seeds):
                index = p * parsed.n + j
                self.requests.append(ServeRequest(request_id=f"{self.id}-{index}", prompt_ids=ids,
                                                  config=parsed.config, seed=seed,
                                                  top_logprobs=parsed.top_logprobs,
                                                  constraint=parsed.constraint, max_tokens=parsed.max_tokens,
                                                  stops=stops))
                self.rows.append(RowText(decode, eos, stops, parsed.max_tokens))
                if parsed.prompt_only:
                    self.rows[-1].end_undecoded()
        self._queue: asyncio.Queue[tuple[int, RowUpdate]] = asyncio.Queue()
        self._submitted = 0
        self.disconnected = False  # the client went away before every row was decided

    def submit(self) -> None:
        """Queue every row; on a full queue (QueueFullError) or a refused row (ValueError) the
        rows already queued are cancelled and the error propagates."""
        loop = asyncio.get_running_loop()
        try:
            for index, request in enumerate(self.requests if not self.parsed.prompt_only else []):
                self.scheduler.submit(request, self._callback(loop, index))
                self._submitted += 1
        except (QueueFullError, ValueError):
            self.cancel()
            raise
        self.metrics.prompt_tokens.inc(self.parsed.prompt_tokens)

    def _callback(self, loop: asyncio.AbstractEventLoop, index: int):
        def on_update(update: RowUpdate) -> None:  # the scheduler's thread
            try:
                loop.call_soon_threadsafe(self._queue.put_nowait, (index, update))
            except RuntimeError:  # the event loop has closed: nobody is listening any more
                pass
        return on_update

    @property
    def settled(self) -> bool:
        return all(row.settled for row in self.rows)

    async def events(self, disconnected=None, poll: float = 0.25) -> AsyncIterator[RowEvent]:
        """Events until every row is settled (its answer decided and its stats in). A row a stop
        or max_tokens decides stops in the scheduler in that round (``ServeRequest.stops``;
        the cancel sent here is a backstop; under token editing it decodes its whole canvas, as
        ``generate`` does); its finish event waits for the scheduler's last update, which brings
        its stats. ``disconnected``: an async callable
        polled every ``poll`` seconds; when it answers True the rows are cancelled and iteration
        stops."""
        checked = time.perf_counter()
        editing = self.parsed.config.edit_threshold is not None
        if self.parsed.prompt_only:  # rows of no answer: each one's finish, and nothing decoded
            for index, row in enumerate(self.rows):
                self.metrics.row_finished(row.reason, 0, row.answer_stats)
                yield RowEvent(index=index, text="", finished=True)
        while not self.settled:
            try:
                index, update = await asyncio.wait_for(self._queue.get(), timeout=poll)
            except asyncio.TimeoutError:
                update = None
            if disconnected is not None and time.perf_counter() - checked >= poll:  # also while updates flow
                checked = time.perf_counter()
                if await disconnected():
                    self.disconnected = True
                    self.cancel()
                    return
            if update is None:
                continue
            row = self.rows[index]
            if row.settled:
                continue
            decided = row.done
            row.add(update)
            if self.first_token is None and row.ids:
                self.first_token = time.perf_counter()
                self.metrics.ttft.observe(self.first_token - self.started)
            if row.done and not decided and not update.finished and row.reason != "eos" and not editing:
                # a stop or max_tokens: free the row now (as generate and stream stop it); an
                # end-of-text is stop_at_eos's to end, or, off, the row decodes on as in generate;
                # under token editing generate decodes the whole canvas (api.decided), and so does the row
                self.scheduler.cancel(self.requests[index].request_id)
            if row.settled:
                self.metrics.row_finished(row.reason, len(row.token_ids), row.answer_stats)
            text = row.take_text()
            if text or row.settled:
                yield RowEvent(index=index, text=text, finished=row.settled)
        self.metrics.latency.observe(time.perf_counter() - self.started)

    def cancel(self) -> None:
        """Free every submitted row still in the scheduler (a disconnect, an error, a full queue).
        A row whose answer is decided but that still decodes (an end-of-text without
        stop_at_eos, token editing's whole canvas) is freed too, its answer kept: nobody will
        read the rest."""
        for request, row in zip(self.requests[: self._submitted], self.rows):
            if row.settled:
                continue
            self.scheduler.cancel(request.request_id)
            if not row.done:
                row.reason = "cancelled"
                self.metrics.rows.labels(reason="cancelled").inc()
