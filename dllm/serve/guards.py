"""ASGI middleware that refuses a request before the app sees it: a Host the server does not
answer to (DNS rebinding of a loopback server), a missing or wrong API key, a body that is not
``application/json`` (a web page's simple cross-site POST), a body over the size limit (from
Content-Length before a byte is read, or as soon as a streamed body passes it) and a body that
does not arrive in time. The body is read here, within those bounds, its Content-Encoding and
charset undone (``serve.body``), and handed to the app. Every refusal is a JSON error with the
reason and the fix.
"""
from __future__ import annotations

import asyncio
import hmac
from typing import Any, Awaitable, Callable, MutableMapping

from fastapi.datastructures import Headers
from fastapi.responses import JSONResponse

from dllm.serve.body import CodingError, body_charset, content_codings, decode_body, recode
from dllm.serve.limits import API_KEY_ENV, VLLM_API_KEY_ENV, AccessSettings, ServerLimits
from dllm.serve.responses import error_body

Scope = Message = MutableMapping[str, Any]  # ASGI's (as starlette.types names them)
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
OPEN_PATHS = ("/health", "/metrics", "/version")  # without an API key unless protect_health_metrics
BODY_METHODS = ("POST", "PUT", "PATCH")


class _Refused(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.headers = status, headers or {}


class _ClientGone(Exception):
    """The client disconnected while sending its body: nobody to answer."""


class RequestGuard:
    """Wraps an ASGI app; ``on_refused(path, status)`` counts each refusal (metrics)."""

    def __init__(self, app: ASGIApp, limits: ServerLimits, access: AccessSettings,
                 on_refused: Callable[[str, int], None] | None = None) -> None:
        self.app, self.limits, self.access = app, limits, access
        self.on_refused = on_refused or (lambda path, status: None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        try:
            self._check_host(headers.get("host"))
            self._check_key(scope["path"], headers.get("authorization"))
            if scope["method"] in BODY_METHODS:
                self._check_type(headers.get("content-type"))
                codings, charset = _framing(headers)
                self._check_length(headers.get("content-length"))
                body = await self._read_body(receive)
                receive = _replay(_decoded(body, codings, charset, self.limits.max_body_bytes), receive)
        except _ClientGone:
            return
        except _Refused as refusal:
            self.on_refused(scope["path"], refusal.status)
            response = JSONResponse(error_body(str(refusal), refusal.status), status_code=refusal.status,
                                    headers=refusal.headers)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _check_host(self, host: str | None) -> None:
        allowed = self.access.allowed_hosts
        if allowed is None:
            return
        name = _host_name(host or "").lower()
        if name not in allowed:
            raise _Refused(400, f"this server does not answer to Host {host!r} (it answers to "
                                f"{', '.join(allowed)}); start it with --allowed-hosts NAME to add a name")

    def _check_key(self, path: str, authorization: str | None) -> None:
        key = self.access.api_key
        if key is None or (path in OPEN_PATHS and not self.access.protect_health_metrics):
            return
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
            raise _Refused(401, "a valid API key is required: send the header 'Authorization: Bearer <key>' "
                                f"with the key the server was started with (--api-key, ${API_KEY_ENV} or ${VLLM_API_KEY_ENV})",
                           {"WWW-Authenticate": "Bearer"})

    def _check_type(self, content_type: str | None) -> None:
        media = (content_type or "").split(";")[0].strip().lower()
        if media != "application/json":
            raise _Refused(415, f"the request body must be JSON sent with 'Content-Type: application/json' "
                                f"(got {content_type or 'no Content-Type'!r})")

    def _check_length(self, content_length: str | None) -> None:
        if content_length is None:
            return
        try:
            length = int(content_length)
        except ValueError:
            raise _Refused(400, f"Content-Length {content_length!r} is not a number", CLOSE) from None
        if length > self.limits.max_body_bytes:
            raise _Refused(413, _too_large(self.limits.max_body_bytes), CLOSE)

    async def _read_body(self, receive: Receive) -> bytes:
        """The whole body, refused once it passes the size limit or the deadline."""
        chunks, size = [], 0
        try:
            async with asyncio.timeout(self.limits.body_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise _ClientGone
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.limits.max_body_bytes:
                        raise _Refused(413, _too_large(self.limits.max_body_bytes), CLOSE)
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        return b"".join(chunks)
        except TimeoutError:
            raise _Refused(408, f"the request body did not arrive within {self.limits.body_timeout_s:g} s "
                                f"({size} bytes came); send the whole body at once", CLOSE) from None


CLOSE = {"Connection": "close"}  # the rest of an unread body must not be taken for the next request


def _framing(headers: Headers) -> tuple[list[str], str | None]:
    """The body's content codings and the charset to recode it from, refused (415) before it is read."""
    try:
        return content_codings(headers.getlist("content-encoding")), body_charset(headers.get("content-type"))
    except CodingError as err:
        raise _Refused(err.status, str(err), {**err.headers, **CLOSE}) from None


def _decoded(body: bytes, codings: list[str], charset: str | None, limit: int) -> bytes:
    try:
        body = decode_body(body, codings, limit)
        return recode(body, charset) if charset else body
    except CodingError as err:
        raise _Refused(err.status, str(err), err.headers) from None


def _too_large(limit: int) -> str:
    return (f"the request body is larger than the server's limit of {limit} bytes; send a shorter prompt "
            "or start the server with a larger --max-body-mb")


def _host_name(host: str) -> str:
    """'127.0.0.1:8000' -> '127.0.0.1'; '[::1]:8000' -> '::1'."""
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _replay(body: bytes, receive: Receive) -> Callable[[], Awaitable[Message]]:
    """A receive that hands the app the body already read, then the connection's own messages
    (its disconnect)."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
