"""Test helpers: a one-row-at-a-time Scheduler over ``DiffusionLM.generate_ids`` and a server
on 127.0.0.1 (uvicorn in a thread, on a free port), started and stopped by the test."""
from __future__ import annotations

import collections
import contextlib
import socket
import threading
import time
from typing import Callable

import httpx
import uvicorn

from dllm.serve.protocol import QueueFullError, RowUpdate, Scheduler, SchedulerLimits, ServeRequest


class SerialScheduler(Scheduler):
    """Decodes one request at a time with ``generate_ids`` (its tokens are single-run tokens by
    construction), then hands its answer out one token per "step", ``step_delay`` apart, so
    streaming, stops and cancellation are exercised. ``gate`` holds the loop (queue tests)."""

    def __init__(self, model, limits: SchedulerLimits | None = None, step_delay: float = 0.0) -> None:
        self.model, self.limits, self.step_delay = model, limits or SchedulerLimits(max_batch=1), step_delay
        self.gate = threading.Event()
        self.gate.set()
        self.cancelled: set[str] = set()
        self.finished: dict[str, str] = {}  # request id -> finish reason
        self.submitted: list[ServeRequest] = []
        self._queue: collections.deque = collections.deque()
        self._lock = threading.Condition()
        self._running = 0
        self._closed = False
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def submit(self, request: ServeRequest, on_update: Callable[[RowUpdate], None]) -> None:
        with self._lock:
            if len(self._queue) >= self.limits.max_queue:
                raise QueueFullError(f"{len(self._queue)} requests are waiting", retry_after=1.5)
            self.submitted.append(request)
            self._queue.append((request, on_update))
            self._lock.notify()

    def cancel(self, request_id: str) -> None:
        with self._lock:
            self.cancelled.add(request_id)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify()
        self.gate.set()
        self._thread.join(timeout=10)

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    @property
    def running_rows(self) -> int:
        return self._running

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._lock.wait()
                if self._closed:
                    for request, on_update in self._queue:
                        self._end(request, on_update, "cancelled", None)
                    return
            self.gate.wait()
            with self._lock:
                request, on_update = self._queue.popleft()
                self._running = 1
            try:
                self._decode(request, on_update)
            finally:
                self._running = 0

    def _decode(self, request: ServeRequest, on_update) -> None:
        if request.request_id in self.cancelled:
            return self._end(request, on_update, "cancelled", None)
        start = time.perf_counter()
        out = self.model.generate_ids([request.prompt_ids], request.config, seeds=[request.seed])
        ids = out.token_ids[0]
        eos = set(self.model.model.eos_token_ids)
        for i, token in enumerate(ids):
            if request.request_id in self.cancelled:
                return self._end(request, on_update, "cancelled", None)
            if self.step_delay:
                time.sleep(self.step_delay)
            on_update(RowUpdate(request_id=request.request_id, final_ids=[token], committed={i: token}))
        reason = "eos" if ids and ids[-1] in eos else "length"
        stats = {**out.stats[0], "seconds": time.perf_counter() - start, "queued_seconds": 0.0}
        self._end(request, on_update, reason, stats)

    def _end(self, request: ServeRequest, on_update, reason: str, stats) -> None:
        self.finished[request.request_id] = reason
        on_update(RowUpdate(request_id=request.request_id, finished=True, finish_reason=reason, stats=stats))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_server(app, timeout: float = 20.0):
    """Serve ``app`` on 127.0.0.1 in a thread; yields its base URL; stops it on exit."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the test server did not start within {timeout} s")
        time.sleep(0.05)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=timeout)


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
