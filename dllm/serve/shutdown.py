"""uvicorn with a shutdown deadline.

On SIGTERM / SIGINT uvicorn stops accepting connections and waits for open requests to finish,
for ever by default; a second SIGINT cuts every connection, so a client's stream just stops. Here
open requests get ``deadline_s`` to finish; then (or at once on a second signal of either kind)
``ShutdownState.closing`` is set: every open stream sends a final error event and ends, every
whole request answers 503, and the process exits after ``grace_s`` more whatever is left.
"""
from __future__ import annotations

import asyncio
import logging
import socket
from types import FrameType

import uvicorn

from dllm.serve.app import ShutdownState

log = logging.getLogger(__name__)


class DeadlineServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, state: ShutdownState, deadline_s: float,
                 grace_s: float = 2.0) -> None:
        super().__init__(config)
        self.state, self.deadline_s, self.grace_s = state, deadline_s, grace_s
        self.signals = 0

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.signals += 1
        if self.signals == 1:
            super().handle_exit(sig, frame)
        # a later signal: close streams now (``_deadline``), instead of uvicorn's silent cut

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        watcher = asyncio.create_task(self._deadline())
        try:
            await super().shutdown(sockets)
        finally:
            watcher.cancel()

    async def _deadline(self) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + self.deadline_s
        while loop.time() < end and self.signals < 2:
            await asyncio.sleep(0.05)
        log.warning("shutdown: ending the requests still open (%s)",
                    "second signal" if self.signals >= 2 else f"deadline of {self.deadline_s:g} s")
        self.state.closing = True  # streams notice within a poll (0.25 s) and send their error event
        await asyncio.sleep(self.grace_s)
        self.force_exit = True
