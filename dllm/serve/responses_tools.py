"""Function tools on /v1/responses, as chat's (``dllm.api.tools`` checks and serves them): the
Responses API's flat ``{"type": "function", "name", ...}`` tools and ``tool_choice``, and the
``function_call`` / ``function_call_output`` input items, become chat's ``tools``, ``tool_choice``
and tool turns. Other tool types (web search, file search, MCP, ...) are refused by name: dllm
calls functions only.
"""
from __future__ import annotations

import json
from typing import Any

from dllm.api.tools import MODES
from dllm.serve.requests import RequestError

FUNCTION_KEYS = {"type", "name", "description", "parameters", "strict"}
TOOL_SHAPE = '{"type": "function", "name": ..., "description": ..., "parameters": {JSON schema}, "strict": ...}'
CHOICE_SHAPE = '"none", "auto", "required" or {"type": "function", "name": ...}'
CALL_KEYS = {"type", "call_id", "name", "arguments", "id", "status"}  # id/status: an output item sent back
OUTPUT_KEYS = {"type", "call_id", "output", "id", "status"}


def chat_tools(body: dict[str, Any]) -> dict[str, Any]:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls`` as chat's fields. Without tools,
    tool_choice "none" or "auto" means nothing and is left out (as before tools were served)."""
    tools = _functions(body.get("tools"))
    choice = body.get("tool_choice")
    fields: dict[str, Any] = {"tools": tools} if tools else {}
    if choice is not None and (tools or choice not in ("none", "auto")):
        fields["tool_choice"] = _choice(choice)
        if not tools:  # chat's refusal would quote its own form of the choice
            raise RequestError(f"tool_choice {choice!r} needs tools: give the functions in tools, or leave "
                               "tool_choice out", "tool_choice")
    if body.get("parallel_tool_calls") is not None:
        fields["parallel_tool_calls"] = body["parallel_tool_calls"]
    return fields


def _functions(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise RequestError(f"tools must be a list of {TOOL_SHAPE} objects, got {type(tools).__name__}", "tools")
    out = []
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
        if kind != "function":
            raise RequestError(f"tools[{i}] is a {kind!r} tool, which dllm does not serve: it calls functions only "
                               f"({TOOL_SHAPE}); leave the others out", "tools")
        given = {key: value for key, value in tool.items() if value is not None}
        unknown = sorted(set(given) - FUNCTION_KEYS)
        if unknown:
            raise RequestError(f"tools[{i}] has unknown key(s) {unknown}; a function tool is {TOOL_SHAPE}", "tools")
        out.append({"type": "function", "function": {key: value for key, value in given.items() if key != "type"}})
    return out


def _choice(choice: Any) -> Any:
    if choice in MODES:
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and set(choice) == {"type", "name"}:
        return {"type": "function", "function": {"name": choice["name"]}}
    raise RequestError(f"tool_choice must be {CHOICE_SHAPE} (dllm calls functions only), got {choice!r}"[:300],
                       "tool_choice")


def add_call(messages: list[dict[str, Any]], item: dict[str, Any], i: int) -> None:
    """A ``function_call`` input item -> a call in chat's ``messages``: of the assistant turn just
    before it (an answer's text and calls are one chat message, as chat gave them), or of a new one."""
    _check_keys(item, CALL_KEYS, i, '{"type": "function_call", "call_id": ..., "name": ..., "arguments": "{JSON}"}')
    for key in ("call_id", "name", "arguments"):
        if not isinstance(item.get(key), str):
            raise RequestError(f"input item {i} (function_call): {key} must be a string, got {item.get(key)!r}"[:300],
                               "input")
    try:
        arguments = json.loads(item["arguments"])
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        raise RequestError(f"input item {i} (function_call): arguments must be a JSON object as text, got "
                           f"{item['arguments']!r}"[:300], "input")
    call = {"id": item["call_id"], "type": "function",
            "function": {"name": item["name"], "arguments": item["arguments"]}}
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def call_output(messages: list[dict[str, Any]], item: dict[str, Any], i: int, output: str) -> dict[str, Any]:
    """A ``function_call_output`` input item (``output`` its text) -> chat's ``tool`` message; its
    call_id must answer a function_call sent before it (as OpenAI's API requires)."""
    _check_keys(item, OUTPUT_KEYS, i, '{"type": "function_call_output", "call_id": ..., "output": ...}')
    called = {call["id"] for message in messages for call in message.get("tool_calls") or []}
    if item.get("call_id") not in called:
        raise RequestError(f"input item {i} (function_call_output) answers call_id {item.get('call_id')!r}, which no "
                           "function_call item before it has: send the call before its output", "input")
    return {"role": "tool", "tool_call_id": item["call_id"], "content": output}


def _check_keys(item: dict[str, Any], keys: set[str], i: int, shape: str) -> None:
    extra = sorted(set(item) - keys)
    if extra:
        raise RequestError(f"input item {i} has unknown key(s) {extra}; it is {shape}", "input")
