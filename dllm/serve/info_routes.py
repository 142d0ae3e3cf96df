"""The server's routes that decode nothing: /health, /metrics, /version, /v1/models (and one
model by id), /tokenize and /detokenize (vLLM's shapes). Tokenizing runs off the event loop.
The GET routes answer HEAD too (RFC 9110: a GET resource takes HEAD), for load balancers'
and uptime monitors' probes; FastAPI's ``router.get`` alone answers HEAD with 405."""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import Executor
from importlib import metadata
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from dllm.api.inputs import check_token_ids
from dllm.serve.body import parse_json
from dllm.serve.limits import ServerLimits
from dllm.serve.metrics import ServerMetrics
from dllm.api.tools import ToolError, parse_tool_choice
from dllm.serve.requests import RequestError, chat_messages, check_chars
from dllm.serve.responses import error_response

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def dllm_version() -> str:
    try:
        return metadata.version("dllm")
    except metadata.PackageNotFoundError:
        return "unknown"


def info_router(model, scheduler, metrics: ServerMetrics, served_name: str, limits: ServerLimits,
                executor: Executor) -> APIRouter:
    router = APIRouter()

    def get(path: str):  # a GET route that answers HEAD too (curl -I, uptime checks)
        return router.api_route(path, methods=["GET", "HEAD"])

    # created: when this server began serving the model (OpenAI's card has a Unix time there)
    card = {"id": served_name, "object": "model", "created": int(time.time()), "owned_by": "dllm",
            "root": str(model.path.name),
            "max_model_len": model.model.config.max_sequence_length}

    @get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "queue_depth": scheduler.queue_depth, "running_rows": scheduler.running_rows}

    @get("/metrics")
    async def metrics_text() -> Response:
        return Response(metrics.render(), media_type=METRICS_CONTENT_TYPE)

    @get("/version")
    async def version() -> dict[str, str]:
        return {"version": dllm_version()}

    @get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [card]}

    @get("/v1/models/{model_id:path}")
    async def one_model(model_id: str) -> Response:
        if model_id == "":  # /v1/models/ (a base URL's trailing slash): the list, as the redirect vLLM sends gives
            return JSONResponse(await models())
        if model_id != served_name:
            return error_response(metrics, "models", f"the model {model_id!r} does not exist; this server serves "
                                  f"{served_name!r}", 404, "model")
        return JSONResponse(card)

    @router.post("/tokenize")
    async def tokenize(request: Request) -> Response:
        return await _run(request, metrics, "tokenize", executor, _tokenize, model, served_name, limits)

    @router.post("/detokenize")
    async def detokenize(request: Request) -> Response:
        return await _run(request, metrics, "detokenize", executor, _detokenize, model, served_name)

    return router


async def _run(request: Request, metrics: ServerMetrics, endpoint: str, executor: Executor, work, *args) -> Response:
    """``work(body, *args)`` on the executor, its answer as JSON (a RequestError as its 4xx)."""
    raw = await request.body()
    try:
        answer = await asyncio.get_running_loop().run_in_executor(executor, _parse_then, work, raw, args)
    except RequestError as err:
        return error_response(metrics, endpoint, str(err), err.status, err.param)
    metrics.requests.labels(endpoint=endpoint, status="200").inc()
    return JSONResponse(answer)


def _parse_then(work, raw: bytes, args: tuple) -> dict[str, Any]:
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise RequestError(f"the request body must be a JSON object, got {type(body).__name__}")
    return work(body, *args)


def _check_model(body: dict, served_name: str) -> None:
    name = body.get("model")
    if name is not None and name != served_name:
        raise RequestError(f"the model {name!r} does not exist; this server serves {served_name!r}", "model",
                           status=404)


def _tokenize(body: dict, model, served_name: str, limits: ServerLimits) -> dict[str, Any]:
    """{"prompt": str} or {"messages": [...], "tools": [...]} (through the chat template, which shows
    the tools as a chat request's prompt does; vLLM's field) -> token ids (and their strings with
    return_token_strs)."""
    _check_model(body, served_name)
    chat = "messages" in body
    _check_vllm_tokenize_fields(body, chat)
    unknown = sorted(set(body) - {"model", "prompt", "messages", *TOKENIZE_EXTRAS} - ({"tools"} if chat else set()))
    if unknown or ("prompt" in body) == chat:
        raise RequestError('give either "prompt" (a string) or "messages" (chat messages, and their "tools"), '
                           "nothing else" + (f"; unknown field(s) {unknown}" if unknown else ""))
    if chat:
        prompt = chat_messages(body["messages"])
        try:
            tools = parse_tool_choice(body.get("tools"))
        except ToolError as err:
            raise RequestError(str(err), err.field) from None
    else:
        prompt, tools = body["prompt"], None
        if not isinstance(prompt, str):
            raise RequestError("prompt must be a string", "prompt")
    context = model.model.config.max_sequence_length
    check_chars([prompt], limits, context, chat, tools)
    try:
        ids = model.encode(prompt, chat=chat, tools=tools.template_tools() if tools else None)
    except ValueError as err:
        raise RequestError(str(err).replace("prompt 0, ", "", 1), "messages") from None
    strings = model.tokenizer.convert_ids_to_tokens(ids) if body.get("return_token_strs") else None
    return {"tokens": ids, "count": len(ids), "max_model_len": context, "token_strs": strings}


# vLLM's /tokenize fields: add_special_tokens and add_generation_prompt only as dllm's requests
# encode (no special tokens added, chat with the assistant's turn opened), so the count is what
# the model reads; return_token_strs served
TOKENIZE_EXTRAS = ("add_special_tokens", "add_generation_prompt", "return_token_strs")


def _check_vllm_tokenize_fields(body: dict, chat: bool) -> None:
    """A 400 for a TOKENIZE_EXTRAS value that would tokenize otherwise than dllm's requests do."""
    for key in TOKENIZE_EXTRAS:
        if body.get(key) is not None and not isinstance(body[key], bool):
            raise RequestError(f"{key} must be true or false, got {body[key]!r}", key)
    if body.get("add_special_tokens") is True:
        raise RequestError("add_special_tokens: dllm's requests encode a prompt (and a chat template's text) "
                           "without adding special tokens, so the count would not be what the model reads; "
                           "leave it out or send false", "add_special_tokens")
    if body.get("add_generation_prompt") is False or (not chat and "add_generation_prompt" in body):
        raise RequestError("add_generation_prompt: dllm's chat always opens the assistant's turn (true), and a "
                           "prompt has none; leave it out", "add_generation_prompt")


def _detokenize(body: dict, model, served_name: str) -> dict[str, Any]:
    """{"tokens": [ids]} -> their text (special tokens kept)."""
    _check_model(body, served_name)
    if set(body) - {"model", "tokens"} or not isinstance(body.get("tokens"), list):
        raise RequestError('give "tokens": a list of token ids', "tokens")
    try:
        ids = check_token_ids([body["tokens"]], model.model.config.vocab_size)[0]
    except ValueError as err:
        raise RequestError(str(err).replace("prompt 0, ", "", 1), "tokens") from None
    return {"prompt": model.tokenizer.decode(ids, skip_special_tokens=False)}
