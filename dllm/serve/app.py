"""The OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions (whole or streamed as
SSE), /v1/responses (OpenAI's Responses API on the chat path: ``responses_api``), and the routes
of ``info_routes`` (/v1/models, /health, /metrics, /version, /tokenize, /detokenize).

``guards.RequestGuard`` refuses what must not reach a handler (Host, API key, content type, body
size and deadline); CORS headers are sent only for ``--allowed-origins``. Every request is then
parsed and validated off the event loop (``requests.parse_request`` tokenizes) before anything
reaches the scheduler: a bad one answers 4xx with the reason, a full queue 429 with Retry-After.
Streams send text as it becomes final; a client that goes away has its rows cancelled; when the
server shuts down past its deadline (``ShutdownState.closing``), open streams get a final error
event and whole requests a 503.
"""
from __future__ import annotations

import asyncio
import logging
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError, StarletteHTTPException
from fastapi.responses import JSONResponse, Response, StreamingResponse

from dllm.serve.body import BIG_BODY, parse_json, release_memory
from dllm.serve.cors import JsonCORSMiddleware
from dllm.serve.guards import RequestGuard
from dllm.serve.logprob_format import prompt_completion_logprobs
from dllm.serve.info_routes import info_router
from dllm.serve.limits import AccessSettings, ServerLimits
from dllm.serve.metrics import ServerMetrics
from dllm.serve.prompt_logprobs import prompt_logprobs
from dllm.serve.protocol import QueueFullError, Scheduler
from dllm.serve.requests import ParsedRequest, RequestError, ServerDefaults, parse_request
from dllm.serve.tool_stream import ToolStream
from dllm.serve.responses import DONE, ResponseWriter, error_body, error_response, internal_error, sse
from dllm.serve.responses_api import ResponsesCall, Translate
from dllm.serve.session import RowSession

log = logging.getLogger(__name__)
ENDPOINTS = {"/v1/completions": "completions", "/v1/chat/completions": "chat", "/v1/responses": "responses"}
SHUTTING_DOWN = "the server is shutting down; retry on another instance or after it restarts"


@dataclass(slots=True)
class ShutdownState:
    """Set ``closing`` (from the event loop) to end open requests: streams get an error event."""

    closing: bool = False


def create_app(model, scheduler: Scheduler, *, defaults: ServerDefaults | None = None,
               served_name: str | None = None, limits: ServerLimits | None = None,
               access: AccessSettings | None = None) -> FastAPI:
    """A FastAPI app serving ``model`` (a dllm.DiffusionLM) through ``scheduler``; the caller
    owns the scheduler (and closes it). ``app.state.shutdown`` ends open requests when set."""
    defaults, limits, access = defaults or ServerDefaults(), limits or ServerLimits(), access or AccessSettings()
    served_name = served_name or model.path.name
    metrics = ServerMetrics(scheduler)
    shutdown = ShutdownState()
    executor = ThreadPoolExecutor(limits.tokenizer_threads, thread_name_prefix="dllm-parse")
    app = FastAPI(title="dllm", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.metrics, app.state.shutdown = metrics, shutdown
    app.include_router(info_router(model, scheduler, metrics, served_name, limits, executor))
    _add_error_handlers(app, metrics)

    def parse(raw: bytes, chat: bool, translate: Translate | None = None) -> ParsedRequest:  # on the executor
        try:
            def parse_body(body: Any) -> ParsedRequest:  # JSON, Unicode, tokenizing
                return parse_request(body, model, defaults, chat=chat, served_name=served_name,
                                     limits=limits, max_rows=scheduler.max_rows_per_request)
            # translate(body, parse_body): another API's request checked, then parsed as the chat one it asks for
            return translate(parse_json(raw), parse_body) if translate else parse_body(parse_json(raw))
        finally:
            if len(raw) > BIG_BODY:
                release_memory()

    async def handle(request: Request, *, chat: bool, endpoint: str | None = None,
                     translate: Translate | None = None) -> Response:
        endpoint = endpoint or ("chat" if chat else "completions")
        if shutdown.closing:
            return error_response(metrics, endpoint, SHUTTING_DOWN, 503)
        try:
            raw = await request.body()
            parsed = await asyncio.get_running_loop().run_in_executor(executor, parse, raw, chat, translate)
            session = RowSession(parsed, model, scheduler, metrics)
            session.submit()
        except RequestError as err:
            return error_response(metrics, endpoint, str(err), err.status, err.param)
        except QueueFullError as err:
            retry = max(1, math.ceil(err.retry_after))
            return error_response(metrics, endpoint, f"{err}; retry after {retry} s", 429,
                                  headers={"Retry-After": str(retry)})
        except ValueError as err:  # the scheduler refused the rows (before any model work)
            return error_response(metrics, endpoint, str(err), 400)
        except RuntimeError as err:  # the scheduler is shutting down
            return error_response(metrics, endpoint, str(err), 503)
        writer = ResponseWriter(chat, served_name, session.id, parsed.seed, parsed.top_logprobs, parsed.include_usage,
                                parsed.tools)
        echoed: list[dict[str, Any]] | None = None  # each prompt's logprobs (echo with logprobs)
        if parsed.echo and parsed.logprobs:
            try:  # while the scheduler decodes the rows
                echoed = await asyncio.get_running_loop().run_in_executor(executor, _echo_logprobs, model, parsed)
            except BaseException:
                session.cancel()
                raise

        async def gone() -> bool:
            return shutdown.closing or await request.is_disconnected()

        if parsed.stream:
            if parsed.continuous_usage:
                writer.usage_per_chunk([len(parsed.prompt_ids[i // parsed.n]) for i in range(len(session.rows))],
                                       session.rows)
            metrics.requests.labels(endpoint=endpoint, status="200").inc()
            return StreamingResponse(_stream(session, parsed, writer, gone, shutdown, echoed),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        try:
            async for _ in session.events(gone):
                pass
        finally:
            session.cancel()
        if shutdown.closing:
            return error_response(metrics, endpoint, SHUTTING_DOWN, 503)
        failed = [row for row in session.rows if row.reason in ("error", "cancelled")]
        if failed:
            status = 500 if failed[0].reason == "error" else 503
            return error_response(metrics, endpoint, failed[0].error or f"the row was {failed[0].reason} by the "
                                  "server", status)
        echoes = [_echo(parsed, i) for i in range(len(session.rows))]
        texts = [echo + row.cut.text for echo, row in zip(echoes, session.rows)]
        metrics.requests.labels(endpoint=endpoint, status="200").inc()
        return JSONResponse(writer.whole(texts, session.rows, parsed.prompt_tokens, [len(e) for e in echoes],
                                         [echoed[i // parsed.n] for i in range(len(echoes))] if echoed else None))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await handle(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await handle(request, chat=True)

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:  # OpenAI's Responses API, answered by the chat path
        call = ResponsesCall()
        return call.respond(await handle(request, chat=True, endpoint="responses", translate=call.parse))

    def refused(path: str, status: int) -> None:
        metrics.requests.labels(endpoint=ENDPOINTS.get(path, "other"), status=str(status)).inc()

    app.add_middleware(RequestGuard, limits=limits, access=access, on_refused=refused)
    if access.allowed_origins:  # outside the guard: a browser's preflight carries no API key
        app.add_middleware(JsonCORSMiddleware, origins=tuple(access.allowed_origins), on_refused=refused)
    return app


def _add_error_handlers(app: FastAPI, metrics: ServerMetrics) -> None:
    """Every error in OpenAI's JSON shape: unknown paths and methods, and (never expected) a
    handler's exception as a JSON 500 that is counted, instead of a plain-text one."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return error_response(metrics, "other", message, exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        return error_response(metrics, "other", str(exc), 400)

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception) -> Response:
        log.exception("request %s %s failed", request.method, request.url.path)
        return error_response(metrics, ENDPOINTS.get(request.url.path, "other"), internal_error(exc), 500)


def _echo(parsed: ParsedRequest, index: int) -> str:
    return parsed.prompt_texts[index // parsed.n] if parsed.echo else ""


def _echo_logprobs(model, parsed: ParsedRequest) -> list[dict[str, Any]]:
    """Each prompt's tokens' logprobs in the completion shape (``prompt_logprobs``)."""
    decode = lambda ids: model.tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731
    top = parsed.top_logprobs or 0
    answer = 0 if parsed.prompt_only else parsed.config.gen_length  # max_tokens 0: the prompt alone, no masks
    return [prompt_completion_logprobs(prompt_logprobs(model.model, ids, answer, top), ids,
                                       decode) for ids in parsed.prompt_ids]


async def _stream(session: RowSession, parsed: ParsedRequest, writer: ResponseWriter, gone, shutdown: ShutdownState,
                  echoed: list[dict[str, Any]] | None = None):
    """SSE: a first chunk per choice (the chat role, or the echoed prompt with its logprobs when
    asked: ``echoed``, one per prompt), text as it becomes
    final (with its tokens' logprobs when asked), a finish chunk per choice, usage if asked, then
    ``[DONE]``. Rows still running when the client leaves (or anything fails) are cancelled. A
    failed decode, an unexpected error and shutdown end the stream as vLLM does: an error event
    (the ``openai`` client raises APIError with its message), then ``[DONE]``."""
    try:
        for index in range(len(session.rows)):
            if parsed.chat:
                yield writer.chunk(index, None if parsed.tools else "", role=True)  # content may stay null
            elif parsed.echo:
                yield writer.chunk(index, _echo(parsed, index), logprobs=echoed[index // parsed.n] if echoed else None)
        tool_streams = [ToolStream(parsed.tools) for _ in session.rows] if parsed.tools else None
        async for event in session.events(gone):
            row = session.rows[event.index]
            if row.reason == "error":
                yield sse(error_body(row.error or "decoding failed", 500)) + DONE
                return
            if tool_streams:  # the text as content and tool-call deltas (logprobs kept for the next one out)
                tools = tool_streams[event.index]
                deltas = tools.feed(event.text) + (tools.finish() if event.finished else [])
                logprobs = writer.logprobs(row) if deltas or event.finished else None
                for delta in deltas:
                    yield writer.chunk(event.index, None, logprobs=logprobs, delta=delta)
                    logprobs = None
                if event.finished:
                    yield writer.chunk(event.index, None, row, logprobs=logprobs, tool_calls=tools.calls)
                continue
            logprobs = writer.logprobs(row, len(_echo(parsed, event.index)))
            if event.text:
                yield writer.chunk(event.index, event.text, logprobs=logprobs)
                logprobs = None
            if event.finished:
                yield writer.chunk(event.index, None if parsed.chat else "", row, logprobs=logprobs)
        if shutdown.closing:
            yield sse(error_body(SHUTTING_DOWN, 503)) + DONE
            return
        if session.disconnected:
            return
        if parsed.include_usage:
            yield writer.usage_chunk(session.rows, parsed.prompt_tokens)
        yield DONE
    except Exception as error:  # never expected: the headers went out, so the error goes in the stream
        log.exception("stream of request %s failed", session.id)
        yield sse(error_body(internal_error(error), 500)) + DONE
    finally:
        session.cancel()
