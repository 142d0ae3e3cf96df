"""uvicorn's h11 connection with a deadline on a request's headers.

uvicorn closes a kept-alive connection that stays idle (``timeout_keep_alive``) but waits for
ever on one that sends half a request line or half its headers: a few hundred such connections
would hold the server's sockets. This protocol closes a connection whose request headers are not
complete ``header_timeout_s`` after it opened, or after the first byte of its next request. (A
half-sent body is the guard's business: ``guards.RequestGuard`` gives it a deadline of its own.)
"""
from __future__ import annotations

import asyncio

from uvicorn.protocols.http.h11_impl import H11Protocol


class HeaderDeadlineProtocol(H11Protocol):
    header_timeout_s: float = 10.0
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._waiting_for_headers():
            if self._header_timer is None:
                self._arm()
        else:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _waiting_for_headers(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _expired(self) -> None:
        self._header_timer = None
        if self._waiting_for_headers() and not self.transport.is_closing():
            self.transport.close()


def header_deadline_protocol(seconds: float) -> type[HeaderDeadlineProtocol]:
    """The protocol class to give ``uvicorn.Config(http=...)``, with its deadline."""
    return type("HeaderDeadlineProtocol", (HeaderDeadlineProtocol,), {"header_timeout_s": seconds})
