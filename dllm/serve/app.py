"""The OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions (whole or streamed as
SSE), /v1/models, /health, /metrics.

Every request is parsed and validated (``requests.parse_request``) before anything reaches the
scheduler: a bad one answers 400 with the reason, a full queue 429 with Retry-After. Streams
send text as it becomes final; a client that goes away has its rows cancelled.
"""
from __future__ import annotations

import json
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from dllm.serve.metrics import ServerMetrics
from dllm.serve.protocol import QueueFullError, Scheduler
from dllm.serve.requests import ParsedRequest, RequestError, ServerDefaults, parse_request
from dllm.serve.responses import DONE, ResponseWriter, error_body, sse
from dllm.serve.session import RowSession

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def create_app(model, scheduler: Scheduler, *, defaults: ServerDefaults | None = None,
               served_name: str | None = None) -> FastAPI:
    """A FastAPI app serving ``model`` (a dllm.DiffusionLM) through ``scheduler``; the caller
    owns the scheduler (and closes it)."""
    defaults = defaults or ServerDefaults()
    served_name = served_name or model.path.name
    metrics = ServerMetrics(scheduler)
    app = FastAPI(title="dllm", docs_url=None, redoc_url=None)
    app.state.metrics = metrics

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "queue_depth": scheduler.queue_depth, "running_rows": scheduler.running_rows}

    @app.get("/metrics")
    async def metrics_text() -> Response:
        return Response(metrics.render(), media_type=METRICS_CONTENT_TYPE)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": served_name, "object": "model", "created": 0, "owned_by": "dllm",
                                            "root": str(model.path.name)}]}

    async def handle(request: Request, *, chat: bool) -> Response:
        endpoint = "chat" if chat else "completions"
        try:
            body = await _json_body(request)
            parsed = parse_request(body, model, defaults, chat=chat, served_name=served_name)
            session = RowSession(parsed, model, scheduler, metrics)
            session.submit()
        except RequestError as err:
            return _error(metrics, endpoint, str(err), err.status, err.param)
        except QueueFullError as err:
            retry = max(1, math.ceil(err.retry_after))
            return _error(metrics, endpoint, f"{err}; retry after {retry} s", 429, headers={"Retry-After": str(retry)})
        except ValueError as err:  # the scheduler refused the rows (before any model work)
            return _error(metrics, endpoint, str(err), 400)
        except RuntimeError as err:  # the scheduler is shutting down
            return _error(metrics, endpoint, str(err), 503)
        writer = ResponseWriter(chat, served_name, session.id)
        prompt_tokens = sum(len(ids) for ids in parsed.prompt_ids) * parsed.n
        if parsed.stream:
            metrics.requests.labels(endpoint=endpoint, status="200").inc()
            return StreamingResponse(_stream(session, parsed, writer, request, prompt_tokens),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        try:
            async for _ in session.events(request.is_disconnected):
                pass
        finally:
            session.cancel()
        failed = [row for row in session.rows if row.reason in ("error", "cancelled")]
        if failed:
            status = 500 if failed[0].reason == "error" else 503
            return _error(metrics, endpoint, failed[0].error or f"the row was {failed[0].reason} by the server", status)
        texts = [_echo(parsed, i) + row.cut.text for i, row in enumerate(session.rows)]
        metrics.requests.labels(endpoint=endpoint, status="200").inc()
        return JSONResponse(writer.whole(texts, session.rows, prompt_tokens))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await handle(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await handle(request, chat=True)

    return app


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RequestError(f"the request body is not valid JSON ({err})") from None


def _echo(parsed: ParsedRequest, index: int) -> str:
    return parsed.prompt_texts[index // parsed.n] if parsed.echo else ""


def _error(metrics: ServerMetrics, endpoint: str, message: str, status: int, param: str | None = None,
           headers: dict[str, str] | None = None) -> JSONResponse:
    metrics.requests.labels(endpoint=endpoint, status=str(status)).inc()
    return JSONResponse(error_body(message, status, param), status_code=status, headers=headers)


async def _stream(session: RowSession, parsed: ParsedRequest, writer: ResponseWriter, request: Request,
                  prompt_tokens: int):
    """SSE: a first chunk per choice (the chat role, or the echoed prompt), text as it becomes
    final, a finish chunk per choice, usage if asked, then ``[DONE]``. Rows still running when
    the client leaves (or anything fails) are cancelled."""
    try:
        for index in range(len(session.rows)):
            if parsed.chat:
                yield writer.chunk(index, "", role=True)
            elif parsed.echo:
                yield writer.chunk(index, _echo(parsed, index))
        async for event in session.events(request.is_disconnected):
            row = session.rows[event.index]
            if row.reason == "error":
                yield sse(error_body(row.error or "decoding failed", 500))
                return
            if event.text:
                yield writer.chunk(event.index, event.text)
            if event.finished:
                yield writer.chunk(event.index, None if parsed.chat else "", row)
        if session.disconnected:
            return
        if parsed.include_usage:
            yield writer.usage_chunk(session.rows, prompt_tokens)
        yield DONE
    finally:
        session.cancel()
