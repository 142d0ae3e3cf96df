"""Test helpers: the scheduler with a record of its rows, and a server on 127.0.0.1 (uvicorn in
a thread, on a free port), started and stopped by the test."""
from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Callable

import httpx
import uvicorn

from dllm.serve.protocol import RowUpdate, SchedulerLimits, ServeRequest
from dllm.serve.scheduler import BatchScheduler


class RecordingScheduler(BatchScheduler):
    """The real scheduler, also recording what was submitted and how each row ended."""

    def __init__(self, model, limits: SchedulerLimits | None = None) -> None:
        self.submitted: list[ServeRequest] = []
        self.finished: dict[str, str] = {}  # request id -> finish reason
        super().__init__(model, limits)

    def submit(self, request: ServeRequest, on_update: Callable[[RowUpdate], None]) -> None:
        def record(update: RowUpdate) -> None:
            if update.finished:
                self.finished[update.request_id] = update.finish_reason
            on_update(update)

        super().submit(request, record)
        self.submitted.append(request)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_server(app, timeout: float = 20.0, **config):
    """Serve ``app`` on 127.0.0.1 in a thread; yields its base URL; stops it on exit. ``config``:
    more uvicorn.Config options (e.g. ``http``, the connection protocol)."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="off", **config))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url + "/health", timeout=1).status_code in (200, 401):  # 401: a protected /health
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


@contextlib.contextmanager
def served_model(model, defaults, scheduler_class=BatchScheduler, **limits):
    """``model`` behind a running server of ``defaults`` (a ServerDefaults), served as "m";
    yields (scheduler, base URL); ``limits``: SchedulerLimits fields (default 4 rows, 8 queued)."""
    from dllm.serve.app import create_app

    scheduler = scheduler_class(model, SchedulerLimits(**{"max_batch": 4, "max_queue": 8, **limits}))
    try:
        with running_server(create_app(model, scheduler, defaults=defaults, served_name="m")) as url:
            yield scheduler, url
    finally:
        scheduler.close()
