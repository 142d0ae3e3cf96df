"""Tool calling (OpenAI's ``tools`` / ``tool_choice``): which tools the chat template shows, the
constraint a forced call decodes under, and an answer read back as tool calls.

A named function or ``required`` decodes under a JSON schema, so the answer is a call whatever the
model: the function's arguments (named), or a list of ``{"name", "arguments"}`` objects, one tool's
each (``required``; exactly one when ``parallel_tool_calls`` is false). ``auto`` lets the model answer
or call, its calls read from the text in the form a tool call parser names (``tool_parsers``; the
first alone when ``parallel_tool_calls`` is false, as vLLM): one the user names (trusted, as vLLM's
``--tool-call-parser``), else Hermes' (``<tool_call>{"name": ..., "arguments": ...}</tool_call>``),
which needs a chat template that shows the tools in that form (the Qwen2.5 / Qwen3 templates of
Dream, Fast-dLLM v2 and SDAR, Ling 2.0's of LLaDA2.x). ``none`` answers in text and
keeps the tools out of the prompt (as vLLM's ``--exclude-tools-when-tool-choice-none``; its
default shows them).
"""
from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from dllm.api.structured import parse_constraint
from dllm.api.tool_parsers import HERMES_OPEN, NAMES as PARSER_NAMES, ToolParser, tool_parser

TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
NO_PARAMETERS = {"type": "object", "properties": {}}
MODES = ("none", "auto", "required")


class ToolError(ValueError):
    """A bad ``tools`` / ``tool_choice`` / tool message, with the request field at fault."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call: the function's name and its arguments as JSON text (OpenAI's ``function``)."""

    name: str
    arguments: str

    def openai(self, call_id: str | None = None) -> dict[str, Any]:
        return {"id": call_id or new_call_id(), "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """A request's tools (OpenAI's function definitions, ``parameters`` filled in) and how it
    lets the model use them: ``mode`` "none", "auto", "required" or "named" (``name``); ``parser``:
    the form ``auto`` calls are read in, as the user named it (None: Hermes', the template's)."""

    functions: tuple[dict[str, Any], ...]
    mode: str
    name: str | None = None
    parallel: bool = True
    parser: str | None = None

    @property
    def calls_form(self) -> ToolParser:
        """How ``auto`` answers write their calls."""
        return tool_parser(self.parser or "hermes")

    @property
    def forced(self) -> bool:
        """The answer is a call, decoded under ``schema()``."""
        return self.mode in ("required", "named")

    def template_tools(self) -> list[dict[str, Any]] | None:
        """The tools the chat template renders (None with ``none``: the model may not call one)."""
        if self.mode == "none":
            return None
        return [{"type": "function", "function": f} for f in self.functions]

    def schema(self) -> dict[str, Any] | None:
        """The JSON schema a forced answer is a word of (None: free text)."""
        if self.mode == "named":
            return next(f["parameters"] for f in self.functions if f["name"] == self.name)
        if self.mode != "required":
            return None
        definitions: dict[str, Any] = {}
        calls = [{"type": "object", "properties": {"name": {"const": f["name"]},
                                                   "arguments": _hoisted(f["parameters"], f["name"], definitions)},
                  "required": ["name", "arguments"], "additionalProperties": False} for f in self.functions]
        schema: dict[str, Any] = {"type": "array", "items": {"anyOf": calls}, "minItems": 1}
        if not self.parallel:
            schema["maxItems"] = 1
        if definitions:
            schema["$defs"] = definitions
        return schema

    def too_large_hint(self) -> str:
        """What to change when a forced call's constraint is too large to build: a required call
        holds every tool's arguments, twice with parallel calls (the list's first call, the rest)."""
        if self.mode != "required":
            return ""
        parallel = ", set parallel_tool_calls false (one call: about half the states)" if self.parallel else ""
        return ('; a "required" call may be any of the tools\', so its constraint grows with each: name one '
                f'(tool_choice {{"type": "function", "function": {{"name": ...}}}}){parallel} or send fewer tools')

    def read(self, text: str) -> tuple[str | None, list[ToolCall]]:
        """``text`` -> (the message's content, its tool calls). A named call's arguments are the text
        (cut short when the answer ran out of tokens, as OpenAI's); other text that is not whole
        calls stays content, with no calls, as vLLM's parsers leave it."""
        if self.mode == "named":  # the arguments as written, whole or (finish_reason "length") cut
            return None, [ToolCall(self.name, text)]
        if self.mode == "required":
            calls = _calls(_json_value(text))
            return (None, calls) if calls else (text, [])
        if self.mode == "auto":  # every call whole, or none is
            content, read = self.calls_form.split(text, {f["name"] for f in self.functions})
            calls = [ToolCall(name, arguments) for name, arguments in read]
            return content, calls if self.parallel else calls[:1]  # parallel_tool_calls false: the first, as vLLM
        return text, []


def _hoisted(parameters: dict[str, Any], name: str, definitions: dict[str, Any]) -> dict[str, Any]:
    """``parameters`` to nest in another schema: its ``$defs`` / ``definitions`` (pydantic writes
    nested models there, referred to as ``#/$defs/Model``) moved into ``definitions`` under the
    function's name, and its references rewritten to them, so they still resolve from the new root."""
    local = {f"#/{key}/{entry}": f"{name}.{entry}" for key in ("$defs", "definitions")
             for entry in parameters.get(key, {}) if isinstance(parameters.get(key), dict)}

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: (f"#/$defs/{local[v]}" if k == "$ref" and isinstance(v, str) and v in local else rewrite(v))
                    for k, v in node.items()}
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    for key in ("$defs", "definitions"):
        for entry, sub in (parameters.get(key) or {}).items():
            definitions[f"{name}.{entry}"] = rewrite(sub)
    return rewrite({k: v for k, v in parameters.items() if k not in ("$defs", "definitions")})


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _calls(value: Any) -> list[ToolCall]:
    """A list of ``{"name", "arguments"}`` objects -> calls; [] unless every item is one."""
    if not isinstance(value, list) or not value:
        return []
    calls = []
    for item in value:
        if not (isinstance(item, dict) and isinstance(item.get("name"), str)
                and isinstance(item.get("arguments"), dict)):
            return []
        calls.append(ToolCall(item["name"], json.dumps(item["arguments"], ensure_ascii=False)))
    return calls


def parse_tool_choice(tools: Any, tool_choice: Any = None, parallel_tool_calls: Any = None,
                      parser: str | None = None) -> ToolChoice | None:
    """OpenAI's ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` checked -> a ToolChoice (None:
    no tools, or ``none`` without any); ``parser``: the form of ``auto`` calls (``tool_parsers``,
    None: Hermes' where the template shows it). A ToolError names the field and the fix."""
    if parser is not None:
        try:
            tool_parser(parser)
        except ValueError as err:
            raise ToolError(str(err), "tool_call_parser") from None
    functions = _functions(tools)
    if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
        raise ToolError(f"parallel_tool_calls must be true or false, got {parallel_tool_calls!r}",
                        "parallel_tool_calls")
    parallel = parallel_tool_calls is not False
    if tool_choice is None:
        tool_choice = "auto" if functions else "none"
    if isinstance(tool_choice, str):
        if tool_choice not in MODES:
            raise ToolError(f'tool_choice must be "none", "auto", "required" or {{"type": "function", "function": '
                            f'{{"name": ...}}}}, got {tool_choice!r}', "tool_choice")
        mode, name = tool_choice, None
    else:
        mode, name = "named", _named(tool_choice)
    if mode != "none" and not functions:
        raise ToolError(f"tool_choice {tool_choice!r} needs tools: give the functions in tools, or leave "
                        "tool_choice out", "tool_choice")
    if name is not None and name not in {f["name"] for f in functions}:
        raise ToolError(f"tool_choice names the function {name!r}, which is not one of the tools "
                        f"{[f['name'] for f in functions]}", "tool_choice")
    if not functions:
        return None
    for i, function in enumerate(functions):  # a forced call decodes under these schemas
        if mode == "required" or function["name"] == name:
            _check_parameters(function["parameters"], i)
    return ToolChoice(tuple(functions), mode, name, parallel, parser)


def _check_parameters(parameters: dict[str, Any], i: int) -> None:
    """A forced call's schema, as structured output takes it, refused naming the tool (the
    schema of ``required`` nests every tool's deep inside the list of calls)."""
    try:
        parse_constraint(None, None, parameters).to_regex()
    except ValueError as err:
        raise ToolError(f"tools[{i}].function.parameters " + str(err).removeprefix("json_schema "), "tools") from None
    except ImportError as err:  # an install without the structured extra: a 400 that says so
        raise ToolError(f"a forced tool call decodes under tools[{i}].function.parameters, and {err}", "tools") from None


def _functions(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    shape = ('tools must be a list of {"type": "function", "function": {"name": ..., "description": ..., '
             '"parameters": {JSON schema}}} objects')
    if not isinstance(tools, list):
        raise ToolError(f"{shape}; got {type(tools).__name__}", "tools")
    functions: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            raise ToolError(f"tools[{i}]: {shape} (dllm calls functions only)", "tools")
        function = tool["function"]
        name = function.get("name")
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise ToolError(f"tools[{i}].function.name must be 1-64 letters, digits, '_' or '-', got {name!r}", "tools")
        if any(f["name"] == name for f in functions):
            raise ToolError(f"tools[{i}]: two tools are named {name!r}; give each function its own name", "tools")
        unknown = set(function) - {"name", "description", "parameters", "strict"}
        if unknown:
            raise ToolError(f"tools[{i}].function has unknown field(s) {sorted(unknown)}; a function has name, "
                            "description, parameters and strict", "tools")
        if function.get("description") is not None and not isinstance(function["description"], str):
            raise ToolError(f"tools[{i}].function.description must be a string", "tools")
        function = {key: value for key, value in function.items() if value is not None}  # null: left out
        parameters = function.get("parameters")
        if parameters is None or parameters == {}:  # left out, or {} (as clients write a tool of no arguments)
            parameters = NO_PARAMETERS
        if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
            raise ToolError(f"tools[{i}].function.parameters must be a JSON schema of an object "
                            '({"type": "object", "properties": {...}}), got ' + repr(parameters)[:80], "tools")
        # the arguments are an object whatever the schema says: without "type", a schema of no
        # properties would let a forced call's arguments be any JSON value (a list, a string)
        functions.append({**function, "parameters": {"type": "object", **parameters}})
    return functions


def _named(choice: Any) -> str:
    function = choice.get("function") if isinstance(choice, dict) else None
    if not (isinstance(choice, dict) and choice.get("type") == "function" and isinstance(function, dict)
            and isinstance(function.get("name"), str)):
        raise ToolError('tool_choice must be "none", "auto", "required" or {"type": "function", "function": '
                        f'{{"name": ...}}}}, got {choice!r}'[:300], "tool_choice")
    return function["name"]


def check_readable(choice: ToolChoice | None, tokenizer, chosen: bool = True) -> None:
    """``auto`` without a named parser needs a chat template that shows the tools in the form dllm
    reads calls from by default (Hermes' ``<tool_call>``): a model that never sees them, or writes
    calls dllm cannot read, would answer as if there were none. A named parser is trusted, as
    vLLM's. ``chosen``: tool_choice was given (else "auto" is the default of a request with tools)."""
    if choice is None or choice.mode != "auto" or choice.parser is not None:
        return
    shown = template_format(tokenizer)
    if shown != "hermes":
        how = ("ignores tools" if shown is None else
               "shows tools in a form other than Hermes' <tool_call>, the one dllm reads unless told")
        default = "" if chosen else " (the default with tools)"
        raise ToolError(f'tool_choice "auto"{default} lets the model decide to call a tool in its chat template\'s '
                        f"form, and this model's template {how}: set tool_choice \"required\" or "
                        '{"type": "function", "function": {"name": ...}} (dllm decodes the answer as a call '
                        'of the tools) or "none", name the form its calls take (--tool-call-parser / '
                        f"tool_call_parser=: {', '.join(PARSER_NAMES)}), or load the model with a chat template "
                        "that shows tools in Hermes' form (--chat-template / chat_template=)", "tool_choice")


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI's messages -> what chat templates read: an assistant turn's ``tool_calls`` carry their
    arguments as objects (OpenAI sends JSON text; the Qwen templates write ``arguments | tojson``),
    and a content of None (an assistant turn that only called tools) is empty text."""
    out = []
    for j, message in enumerate(messages):
        message = dict(message)
        if message.get("content") is None:
            message["content"] = ""
        if message.get("tool_calls"):
            message["tool_calls"] = [_template_call(call, j, k) for k, call in enumerate(message["tool_calls"])]
        out.append(message)
    return out


def _template_call(call: Any, j: int, k: int) -> dict[str, Any]:
    where = f"message {j}, tool_calls[{k}]"
    function = call.get("function") if isinstance(call, dict) else None
    if not (isinstance(function, dict) and isinstance(function.get("name"), str)):
        raise ToolError(f'{where} must be {{"id": ..., "type": "function", "function": {{"name": ..., '
                        '"arguments": "{JSON}"}}', "messages")
    arguments = function.get("arguments", "{}")
    if isinstance(arguments, str):
        arguments = _json_value(arguments)
    if not isinstance(arguments, dict):
        raise ToolError(f"{where}.function.arguments must be a JSON object (as text), got "
                        f"{function.get('arguments')!r}"[:300], "messages")
    return {**call, "function": {"name": function["name"], "arguments": arguments}}


def template_format(tokenizer) -> str | None:
    """How ``tokenizer``'s chat template shows tools to the model: "hermes" (``<tool_call>``),
    "other" (it renders them some other way), None (it ignores them). Read once per template."""
    cached = getattr(tokenizer, "_dllm_tool_format", None)
    if cached is not None and cached[0] == tokenizer.chat_template:
        return cached[1]
    messages = [{"role": "user", "content": "Hi"}]
    probe = [{"type": "function", "function": {"name": "dllm_probe_tool", "description": "probe",
                                               "parameters": NO_PARAMETERS}}]
    found: str | None = None
    if tokenizer.chat_template is not None:
        plain = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        shown = tokenizer.apply_chat_template(messages, tools=probe, tokenize=False, add_generation_prompt=True)
        if shown != plain:
            found = "hermes" if HERMES_OPEN in shown else "other"
    try:
        tokenizer._dllm_tool_format = (tokenizer.chat_template, found)
    except AttributeError:
        pass
    return found
