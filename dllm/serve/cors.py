"""CORS for ``--allowed-origins``, its refusals in the server's JSON error shape.

starlette's CORSMiddleware answers a preflight it refuses (an origin, method or header not
allowed) with a plain-text 400 "Disallowed CORS origin"; this one sends the same status and
headers with a JSON error that says what was refused and how to allow it.
"""
from __future__ import annotations

from typing import Callable

from fastapi.datastructures import Headers
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response

from dllm.serve.responses import error_body

CORS_METHODS = ("GET", "POST")
CORS_HEADERS = ("Authorization", "Content-Type")


class JsonCORSMiddleware(CORSMiddleware):
    """``CORSMiddleware`` for ``origins`` (GET and POST, the Authorization and Content-Type
    headers); ``on_refused(path, status)`` counts each refused preflight (metrics)."""

    def __init__(self, app, origins: tuple[str, ...], on_refused: Callable[[str, int], None] | None = None) -> None:
        super().__init__(app, allow_origins=list(origins), allow_methods=list(CORS_METHODS),
                         allow_headers=list(CORS_HEADERS))
        self.origins, self.on_refused = origins, on_refused or (lambda path, status: None)

    async def __call__(self, scope, receive, send) -> None:
        headers = Headers(scope=scope) if scope["type"] == "http" else None
        if headers is None or scope["method"] != "OPTIONS" or "origin" not in headers \
                or "access-control-request-method" not in headers:
            await super().__call__(scope, receive, send)
            return

        async def counted(message) -> None:  # a preflight: answered here, never by the app
            if message["type"] == "http.response.start" and message["status"] >= 400:
                self.on_refused(scope["path"], message["status"])
            await send(message)

        await super().__call__(scope, receive, counted)

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code < 400:
            return response
        headers = {k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "content-type")}
        message = "; ".join(self._reasons(request_headers)) or response.body.decode(errors="replace")
        return JSONResponse(error_body(f"CORS preflight refused: {message}", response.status_code),
                            status_code=response.status_code, headers=headers)

    def _reasons(self, request_headers: Headers) -> list[str]:
        origin = request_headers.get("origin", "")
        method = request_headers.get("access-control-request-method", "")
        asked = request_headers.get("access-control-request-headers")
        reasons = []
        if not self.is_allowed_origin(origin=origin):
            reasons.append(f"origin {origin!r} may not call this server (allowed: {', '.join(self.origins)}); start "
                           f"the server with --allowed-origins {','.join((*self.origins, origin))} to allow it")
        if method not in self.allow_methods:
            reasons.append(f"method {method!r} is not served to browsers (use {' or '.join(CORS_METHODS)})")
        refused = [h.strip() for h in (asked or "").split(",") if h.strip() and h.strip().lower() not in self.allow_headers]
        if refused:
            reasons.append(f"header(s) {', '.join(refused)} may not be sent (allowed: {', '.join(CORS_HEADERS)})")
        if request_headers.get("access-control-request-private-network") is not None:
            reasons.append("private network access is not allowed; call the server by a public address")
        return reasons
