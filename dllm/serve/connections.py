"""uvicorn's h11 connection with a deadline on a request's headers, and its refusals in JSON.

uvicorn closes a kept-alive connection that stays idle (``timeout_keep_alive``) but waits for
ever on one that sends half a request line or half its headers: a few hundred such connections
would hold the server's sockets. This protocol closes a connection whose request headers are not
complete ``header_timeout_s`` after it opened, or after the first byte of its next request. (A
half-sent body is the guard's business: ``guards.RequestGuard`` gives it a deadline of its own.)
A request that is not valid HTTP (a malformed request line or header, headers over h11's size
limit), which uvicorn answers in plain text, gets the server's JSON error with h11's reason.
"""
from __future__ import annotations

import asyncio
import json
import sys

import h11
from h11._connection import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE  # uvicorn's default too
from uvicorn.protocols.http.h11_impl import H11Protocol

from dllm.serve.responses import error_body


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

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request h11 cannot parse (called while handling h11's error),
        as JSON; the connection is closed after it, as uvicorn does."""
        error = sys.exc_info()[1]
        reason = str(error) if isinstance(error, h11.RemoteProtocolError) and str(error) else msg
        reason = reason.split(": bytearray(")[0].rstrip(".")  # h11 appends the offending bytes
        limit = self.config.h11_max_incomplete_event_size or DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
        body = json.dumps(error_body(
            f"the request is not valid HTTP/1.1 ({reason}); send a well-formed request: a request line such as "
            f"'POST /v1/completions HTTP/1.1', a Host header, headers of at most {limit} bytes in all, a body "
            "framed by Content-Length or valid chunks, as any HTTP client library sends", 400)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        self.transport.write(self.conn.send(h11.Response(status_code=400, headers=headers, reason=b"Bad Request")))
        self.transport.write(self.conn.send(h11.Data(data=body)))
        self.transport.write(self.conn.send(h11.EndOfMessage()))
        self.transport.close()

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
