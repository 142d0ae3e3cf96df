"""An OpenAI request body -> the rows to decode, validated before any model work.

OpenAI fields (prompt or messages, max_tokens, n, seed, temperature, top_p, stop, echo,
stream, logprobs) map onto dllm's: ``max_tokens`` becomes the smallest block-aligned gen_length
(the answer is cut at max_tokens), ``n`` becomes ``n`` rows with distinct seeds (a fresh random
seed when the request gives none). dllm's own options (policy, cache, strategy, their args,
block_length, steps, ...) come as extra body fields, on top of the server's defaults, and go
through GenerationConfig and the policy registries: a bad request is a ``RequestError`` (HTTP
400) with the reason. The costs a request could impose are checked before the work they name:
rows (prompts x n) and the prompt's characters before tokenizing, its tokens against the
context, one row against ``memory_budget_mb``.
"""
from __future__ import annotations

import dataclasses
import json
import numbers
import re
import secrets
from dataclasses import dataclass
from typing import Any

from dllm.engine.config import GenerationConfig, block_aligned_gen_length, sample_seeds
from dllm.engine.logprobs import MAX_TOP_LOGPROBS, check_logprobs
from dllm.engine.model_fit import check_model_fit
from dllm.api.inputs import check_messages, check_token_ids
from dllm.validation import did_you_mean
from dllm.serve.budget import one_row_mib
from dllm.serve.limits import ServerLimits
from dllm.serve.structured_fields import FIELDS as CONSTRAINT_FIELDS, ConstraintFieldError, requested_constraint
from dllm.api.request import DEFAULT_BLOCK_LENGTH, canvas_length  # the server's block when no option sets one
from dllm.api.structured import answer_bound, parse_constraint, row_constraint
from dllm.api.tools import ToolChoice, ToolError, check_readable, parse_tool_choice
from dllm.samplers.constraints import ConstraintSpec, RowConstraint, TableTooLarge
from dllm.api.stops import StopConditions

# dllm's options a request may set as extra body fields (gen_length comes from max_tokens)
DLLM_OPTIONS = ("policy", "policy_args", "strategy", "strategy_args", "stopper", "stopper_args",
                "cache", "cache_args", "sub_block_length", "block_length", "steps", "top_k",
                "cfg_scale", "stop_at_eos", "memory_budget_mb")
# OpenAI fields that mean nothing for the answer (storage, billing, tracing, caching hints) and that
# the openai SDK's users and frameworks send: accepted with any value and ignored, as vLLM does
# (README, "Serving"); safety_identifier replaces user, prompt_cache_* route OpenAI's prompt cache
# (prompt_cache_options: its breakpoints and lifetime)
IGNORED_FIELDS = {"store", "metadata", "service_tier", "user", "safety_identifier", "prompt_cache_key",
                  "prompt_cache_retention", "prompt_cache_options"}
TOOL_FIELDS = {"tools", "tool_choice", "parallel_tool_calls"}  # chat only (dllm.api.tools)
COMMON_FIELDS = {"model", "max_tokens", "n", "seed", "temperature", "top_p", "stop", "stop_token_ids",
                 "stream", "stream_options", "logprobs", "response_format"} | IGNORED_FIELDS | CONSTRAINT_FIELDS
COMPLETION_FIELDS = COMMON_FIELDS | {"prompt", "echo", "parallel_tool_calls"}  # the last: ignored without tools
CHAT_FIELDS = COMMON_FIELDS | TOOL_FIELDS | {"messages", "max_completion_tokens", "top_logprobs", "echo"}  # echo: false alone
# vLLM's chat echo prepends a final assistant message that the answer continues (add_generation_prompt
# off); dllm's chat template always opens a new assistant turn, so no message is ever continued
CHAT_ECHO = ("echo on chat/completions (vLLM's extra) repeats a final assistant message that the answer "
             "continues; dllm answers in a new assistant turn, so there is nothing to echo: leave echo out, "
             "or use /v1/completions with echo=true for the prompt before its answer")
# OpenAI fields that would change the answer and that dllm does not implement: accepted only at
# their neutral value, never ignored
UNSUPPORTED = {"best_of": (None, 1), "presence_penalty": (None, 0), "frequency_penalty": (None, 0),
               "logit_bias": (None, {}), "suffix": (None, ""),
               "modalities": (None, ["text"]), "reasoning_effort": (None,), "functions": (None, []),
               "function_call": (None, "none"), "audio": (None,), "prediction": (None,),
               "web_search_options": (None,), "verbosity": (None, "medium"), "moderation": (None,),
               # vLLM's sampling extras, which its clients (chat UIs, benchmarks) send at their defaults
               "repetition_penalty": (None, 1), "min_p": (None, 0), "min_tokens": (None, 0),
               "ignore_eos": (None, False), "skip_special_tokens": (None, True),
               "spaces_between_special_tokens": (None, True), "include_stop_str_in_output": (None, False),
               "use_beam_search": (None, False), "length_penalty": (None, 1)}
STREAM_OPTIONS = {"include_usage", "continuous_usage_stats"}  # the second vLLM's: usage on every chunk
IGNORED_STREAM_OPTIONS = {"include_obfuscation"}  # random padding of chunks against side channels: none sent
MAX_N = 64


class RequestError(ValueError):
    """A bad request (HTTP ``status``, 400 unless said), with the field at fault."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.param, self.status = param, status


@dataclass(kw_only=True, slots=True)
class ParsedRequest:
    """What a handler needs: one prompt (ids, text for echo) per choice group, ``n`` samples of
    each with their seeds, the shared config, the stops and the answer's token limit."""

    chat: bool
    prompt_ids: list[list[int]]
    prompt_texts: list[str]
    config: GenerationConfig
    seeds: list[int]
    max_tokens: int
    stops: StopConditions
    stream: bool
    include_usage: bool
    echo: bool
    seed: int = 0  # the request's seed (given, or drawn for it): sending it again replays the request
    top_logprobs: int | None = None  # None: no logprobs; k: each answer token's and the k most likely
    constraint: RowConstraint | None = None  # response_format: every row's answer a word of it
    tools: ToolChoice | None = None  # chat tools: how the model may call them, how answers read back
    continuous_usage: bool = False  # stream_options.continuous_usage_stats: each chunk its choice's usage so far

    @property
    def logprobs(self) -> bool:
        return self.top_logprobs is not None

    @property
    def prompt_only(self) -> bool:
        """echo with max_tokens 0 (OpenAI's legacy completions, lm-eval's loglikelihood): the prompt
        and its logprobs come back with no answer, and nothing is decoded."""
        return self.echo and self.max_tokens == 0

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens as usage counts them: each prompt once, whatever ``n`` (as OpenAI)."""
        return sum(len(ids) for ids in self.prompt_ids)

    @property
    def n(self) -> int:
        return len(self.seeds)


@dataclass(kw_only=True, slots=True)
class ServerDefaults:
    """Server-wide defaults (from the command line): GenerationConfig options a request may
    override, max_tokens when a request gives none, and the block length when neither the
    options nor the request set one.

    The block is fixed rather than one block of max_tokens (``generate``'s default) so that
    requests of every length share a batch key and join running batches at block boundaries:
    with one block per request, requests of different max_tokens queued apart and nothing ever
    joined. 32 is Fast-dLLM's and LLaDA's semi-autoregressive block and Fast-dLLM v2's and
    LLaDA2's model block; a block-causal model of smaller blocks decodes windows of its own
    block (``model_block_windows``). A request of fewer tokens decodes one whole block, cut at
    its max_tokens."""

    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    max_tokens: int = 128
    block_length: int = DEFAULT_BLOCK_LENGTH
    tool_call_parser: str | None = None  # the form of "auto" tool calls (None: Hermes', where the template shows it)


def parse_request(body: Any, model, defaults: ServerDefaults, *, chat: bool, served_name: str,
                  limits: ServerLimits | None = None, max_rows: int | None = None) -> ParsedRequest:
    """Validate ``body`` for /v1/chat/completions (``chat``) or /v1/completions. ``max_rows``:
    the most rows the server could ever queue for one request (the scheduler's queue), on top of
    ``limits.max_rows_per_request``. Runs off the event loop: it tokenizes."""
    limits = limits or ServerLimits()
    if not isinstance(body, dict):
        raise RequestError(f"the request body must be a JSON object, got {type(body).__name__}")
    _check_fields(body, CHAT_FIELDS if chat else COMPLETION_FIELDS, chat)
    name = body.get("model")
    if name is not None and name != served_name:
        raise RequestError(f"the model {name!r} does not exist; this server serves {served_name!r}",
                           "model", status=404)
    n = _n(body)
    top_logprobs = _logprobs(body, chat)
    prompts = [chat_messages(body.get("messages"))] if chat else _raw_prompts(body)
    tools = _tools(body, model, defaults.tool_call_parser) if chat else None
    _check_rows(len(prompts) * n, limits, max_rows)
    context = model.model.config.max_sequence_length
    check_chars(prompts, limits, context, chat, tools)
    prompt_ids, prompt_texts = (_chat_prompt(prompts[0], model, tools) if chat
                                else _completion_prompts(prompts, model))
    stream = _flag(body, "stream")
    stream_options = body.get("stream_options")
    if stream_options is not None and (not isinstance(stream_options, dict)
                                       or set(stream_options) - STREAM_OPTIONS - IGNORED_STREAM_OPTIONS):
        raise RequestError('stream_options must be {"include_usage": true|false, "continuous_usage_stats": '
                           'true|false} (include_obfuscation is accepted and ignored)', "stream_options")
    include_usage = _flag(stream_options or {}, "include_usage")
    continuous_usage = _flag(stream_options or {}, "continuous_usage_stats")
    if continuous_usage and not include_usage:  # vLLM sends no usage then: the option would do nothing
        raise RequestError("stream_options.continuous_usage_stats needs include_usage: true", "stream_options")
    if include_usage and not stream:
        raise RequestError("stream_options is only allowed with stream=true", "stream_options")
    block = canvas_length(model.model) or defaults.block_length  # a uniform-state model decodes whole canvases
    echo = _flag(body, "echo")
    asked = _asked_constraint(body, tools)
    bound = None if asked is None else _constraint_field(asked[0], answer_bound, model, asked[1],
                                                         too_large=tools.too_large_hint() if tools else "")
    config, max_tokens, length_field = _config(body, defaults, chat, max(map(len, prompt_ids)), context, block,
                                               prompt_only=echo and not chat, bound=bound)
    try:  # what only the first batch's decode would refuse: a 400 now, not a failed batch
        check_model_fit(model.model, config)
    except ValueError as err:
        raise RequestError(str(err), _field_named(str(err), body)) from None
    if top_logprobs is not None:
        try:
            check_logprobs(top_logprobs, config)
        except ValueError as err:
            raise RequestError(str(err), "logprobs") from None
        if not chat and echo:
            _check_prompt_logprobs(model.model)
    seed = _seed(body)
    try:
        stops = StopConditions.parse(body.get("stop"), body.get("stop_token_ids"),
                                     vocab_size=model.model.config.vocab_size)
    except ValueError as err:
        raise RequestError(str(err), "stop") from None
    _check_lengths(prompt_ids, config, max_tokens, length_field, context, chat)
    _check_budget(model, max(len(ids) for ids in prompt_ids), config, length_field)
    constraint = None if asked is None else _constraint_field(asked[0], row_constraint, model, asked[1], stops,
                                                              max_tokens, config)
    return ParsedRequest(chat=chat, prompt_ids=prompt_ids, prompt_texts=prompt_texts, config=config,
                         seeds=sample_seeds(seed, n), max_tokens=max_tokens, stops=stops, stream=stream,
                         include_usage=include_usage, continuous_usage=continuous_usage, echo=echo, seed=seed,
                         top_logprobs=top_logprobs, constraint=constraint, tools=tools)


def _asked_constraint(body: dict, tools: ToolChoice | None = None) -> tuple[str, ConstraintSpec] | None:
    """(the field asking, its ConstraintSpec) from response_format, one of vLLM's structured-output
    fields or a forced tool call; None: free. A 400 on the field, before any model work: two
    constraints, a bad value."""
    try:
        asked = requested_constraint(body)
    except ConstraintFieldError as err:
        raise RequestError(str(err), err.field) from None
    if tools is not None and tools.mode != "none" and asked is not None:
        raise RequestError(f"{asked[0]} and tool_choice {body.get('tool_choice', 'auto')!r} both say what the answer "
                           f"is, and dllm constrains an answer to one language: drop {asked[0]}, or set tool_choice "
                           '"none"', asked[0])
    if tools is not None and tools.forced:
        return "tools", _constraint_field("tools", parse_constraint, None, None, tools.schema())
    if asked is None:
        return None
    field, argument = asked
    return field, _constraint_field(field, parse_constraint, argument.get("regex"), argument.get("choice"),
                                    argument.get("json_schema"), argument.get("grammar"))


def _constraint_field(field: str, compute, *args, too_large: str = ""):
    """``compute(*args)`` on a constraint from ``field``; what it refuses (a bad value, one this
    model cannot write, a server without the structured extra) is a 400 on that field;
    ``too_large``: what to change when its table is too large to build."""
    try:
        return compute(*args)
    except (ValueError, TypeError) as err:
        more = too_large if isinstance(err, TableTooLarge) else ""
        raise RequestError(f"{field}: {err}{more}", field.split(".")[0]) from None
    except ImportError as err:  # the server lacks the structured extra: say so, not a bare 500
        raise RequestError(f"{field}: this server cannot serve it: {err}", field.split(".")[0]) from None


def _check_fields(body: dict, allowed: set[str], chat: bool) -> None:
    if chat and body.get("echo") not in (None, False):
        raise RequestError(CHAT_ECHO, "echo")
    for key in ("tools", "tool_choice"):
        if not chat and body.get(key) not in (None, [], "none"):
            raise RequestError(f"{key}: tools are called from chat; send them to /v1/chat/completions with messages",
                               key)
    for key, neutral in UNSUPPORTED.items():
        if key in body and body[key] not in neutral:
            raise RequestError(f"{key} is not supported by dllm (it would change the answer, and dllm cannot "
                               f"honour it); leave it out", key)
    unknown = sorted(set(body) - allowed - set(DLLM_OPTIONS) - set(UNSUPPORTED) - TOOL_FIELDS)
    if "gen_length" in unknown:
        raise RequestError("set the answer length with max_tokens (dllm rounds it up to whole blocks)", "gen_length")
    if unknown:
        other = "prompt (use /v1/completions)" if chat else "messages (use /v1/chat/completions)"
        wrong = "prompt" if chat else "messages"
        if unknown == [wrong]:
            raise RequestError(f"this endpoint takes {'messages' if chat else 'prompt'}, not {other}", wrong)
        known = (*allowed, *DLLM_OPTIONS)
        raise RequestError(f"unknown field(s) {unknown}{did_you_mean(unknown[0], known)}; dllm options: "
                           f"{sorted(DLLM_OPTIONS)}", unknown[0])


def _flag(body: dict, key: str) -> bool:
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RequestError(f"{key} must be true or false, got {value!r}", key)
    return value


def _raw_prompts(body: dict) -> list[Any]:
    """``prompt``: a string, a list of strings, a list of token ids or a list of those -> the
    list of prompts (not tokenized yet)."""
    prompt = body.get("prompt")
    if prompt is None:
        raise RequestError("prompt is required", "prompt")
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(t, numbers.Integral) and not isinstance(t, bool)
                                                   for t in prompt):
        return [prompt]
    if isinstance(prompt, list) and prompt:
        return prompt
    raise RequestError("prompt must be a non-empty string, a list of strings or a list of token ids", "prompt")


def _completion_prompts(prompts: list[Any], model) -> tuple[list[list[int]], list[str]]:
    vocab = model.model.config.vocab_size
    ids, texts = [], []
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            row = model.encode(p, chat=False)
            texts.append(p)
        elif isinstance(p, list):
            try:
                row = check_token_ids([p], vocab)[0]
            except ValueError as err:
                raise RequestError(str(err).replace("prompt 0", f"prompt {i}", 1), "prompt") from None
            texts.append(model.tokenizer.decode(row, skip_special_tokens=False))
        else:
            raise RequestError(f"prompt {i} is {type(p).__name__}; give strings or lists of token ids", "prompt")
        ids.append(row)
    return ids, texts


def chat_messages(messages: Any) -> list[dict[str, Any]]:
    """``messages`` checked, each ``content`` a string: OpenAI's list form
    ``[{"type": "text", "text": ...}, ...]`` becomes its texts joined by newlines (as vLLM does)."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list of {'role': ..., 'content': ...} objects", "messages")
    out = []
    for j, message in enumerate(messages):
        if isinstance(message, dict) and isinstance(message.get("content"), list):
            message = {**message, "content": _content_text(message["content"], j, message.get("role"))}
        out.append(message)
    try:
        return check_messages(out, 0)
    except ValueError as err:
        raise RequestError(str(err).replace("prompt 0, ", "", 1), "messages") from None


def _content_text(parts: list[Any], j: int, role: Any = None) -> str:
    """The parts' texts; an assistant turn's ``refusal`` parts (OpenAI's, in a history sent back) are
    its text too, as vLLM reads them."""
    texts = []
    for k, part in enumerate(parts):
        if (role == "assistant" and isinstance(part, dict) and part.get("type") == "refusal"
                and isinstance(part.get("refusal"), str)):
            part = {"type": "text", "text": part["refusal"]}
        if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise RequestError(f"message {j}, content part {k} is {kind!r}; dllm takes text parts only "
                               '({"type": "text", "text": "..."})', "messages")
        texts.append(part["text"])
    return "\n".join(texts)


def _tools(body: dict, model, parser: str | None = None) -> ToolChoice | None:
    """The request's tools checked (``auto`` only where the chat template shows them readably, or
    the server names the form of their calls)."""
    try:
        tools = parse_tool_choice(body.get("tools"), body.get("tool_choice"), body.get("parallel_tool_calls"), parser)
        check_readable(tools, model.tokenizer, chosen="tool_choice" in body)
    except ToolError as err:
        raise RequestError(str(err), err.field) from None
    return tools


def _chat_prompt(messages: list[dict[str, Any]], model,
                 tools: ToolChoice | None = None) -> tuple[list[list[int]], list[str]]:
    try:
        row = model.encode(messages, chat=True, tools=tools.template_tools() if tools else None)
    except ValueError as err:
        raise RequestError(str(err).replace("prompt 0, ", "", 1), "messages") from None
    return [row], [model.tokenizer.decode(row, skip_special_tokens=False)]


def _check_rows(rows: int, limits: ServerLimits, max_rows: int | None) -> None:
    """Prompts x n against the per-request cap and the queue's capacity (before tokenizing)."""
    if rows > limits.max_rows_per_request:
        raise RequestError(f"this request asks for {rows} rows (prompts x n) but the server takes at most "
                           f"{limits.max_rows_per_request} per request (--max-rows-per-request); "
                           "send fewer prompts or a smaller n", "n")
    if max_rows is not None and rows > max_rows:
        raise RequestError(f"this request asks for {rows} rows (prompts x n) but the server's queue holds "
                           f"{max_rows} (--max-queue): it could never be queued; send fewer prompts or a "
                           "smaller n", "n")


def check_chars(prompts: list[Any], limits: ServerLimits, context: int, chat: bool,
                tools: ToolChoice | None = None) -> None:
    """Each prompt's characters (a chat's contents, calls and tools together) against the context's
    bound, before the tokenizer sees them."""
    cap = limits.max_prompt_chars(context)
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, str):
            chars = len(prompt)
        elif chat:
            chars = sum(len(m.get("content") or "") + len(json.dumps(m.get("tool_calls") or "")) for m in prompt)
            chars += len(json.dumps(tools.template_tools() or "")) if tools else 0
        else:
            continue  # token ids: counted exactly by _check_lengths
        if chars > cap:
            where = "the messages" if chat else f"prompt {i}"
            raise RequestError(f"{where} {'have' if chat else 'has'} {chars} characters, more than the model's "
                               f"context could hold (at most {cap}: {context} tokens x {limits.chars_per_token} "
                               "characters per token); shorten the prompt", "messages" if chat else "prompt")


def _config(body: dict, defaults: ServerDefaults, chat: bool, longest: int, context: int,
            block: int, prompt_only: bool = False, bound: int | None = None) -> tuple[GenerationConfig, int, str]:
    """The request's GenerationConfig: server defaults, then the request's fields; its
    max_tokens and the field that gave it (max_tokens or max_completion_tokens). ``longest``:
    the longest prompt's tokens, which bound the default max_tokens within ``context``;
    ``block``: the block when neither the server's options nor the request set one;
    ``prompt_only``: max_tokens 0 is taken (echo: the prompt alone, nothing decoded; the config,
    of one block, is still checked, so the options are refused as for any other length).
    ``bound``: the answer tokens that hold every word of the request's constraint
    (``api.structured.answer_bound``), its max_tokens when it sends none and that is fewer."""
    options = dict(defaults.options)
    options.pop("gen_length", None)
    options.update({k: body[k] for k in DLLM_OPTIONS if k in body})
    if options.get("block_length") is None:
        options["block_length"] = block
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            options[key] = body[key]
    key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = body.get(key)
    if max_tokens is None:
        max_tokens = _default_max_tokens(defaults.max_tokens, options["block_length"], longest, context)
        if bound is not None and bound < max_tokens:
            max_tokens = bound
    nothing = prompt_only and max_tokens == 0 and not isinstance(max_tokens, bool)
    try:
        options["gen_length"] = block_aligned_gen_length(1 if nothing else max_tokens, options.get("block_length"))
    except ValueError as err:
        hint = "" if chat else " (0 only with echo, which returns the prompt and its logprobs with no answer)"
        raise RequestError(str(err).replace("max_tokens", key, 1) + hint, key) from None
    if options.get("steps") is not None and "steps" not in body and options["gen_length"] != defaults.max_tokens:
        options["steps"] = None  # the server's step budget was for its default length
    try:
        config = GenerationConfig(**options)
        from dllm.engine.policies import check_policies

        check_policies(config)
    except (TypeError, ValueError) as err:
        field = getattr(err, "field", None)  # a rule's / strategy's / stopper's name or options
        if field not in body:
            field = _field_named(str(err), body)
        raise RequestError(str(err), field) from None
    return config, max_tokens, key


def check_server_defaults(model, defaults: ServerDefaults) -> None:
    """The server's own options against its model, once at start-up: a ValueError naming them when
    no request that keeps them could be decoded (every such request would be a 400)."""
    context = model.model.config.max_sequence_length
    block = canvas_length(model.model) or defaults.block_length
    try:
        config, _, _ = _config({}, defaults, False, 1, context, block)
        check_model_fit(model.model, config)
    except (RequestError, ValueError) as err:
        raise ValueError(f"the server's options cannot decode this model: {err}") from None


def _default_max_tokens(default: int, block: Any, longest: int, context: int) -> int:
    """max_tokens for a request that sends none: the server's default, or the whole blocks the
    longest prompt leaves in the context when they are fewer (vLLM's default is the rest of the
    context); a prompt that leaves no block is a 400 on the prompt, not on a max_tokens never sent."""
    if isinstance(block, bool) or not isinstance(block, int) or block < 1 or longest < 1:
        return default  # a bad block_length or an empty prompt is refused with its own reason
    room = (context - longest) // block * block
    if room < block:
        raise RequestError(f"the prompt has {longest} tokens: the model's context of {context} leaves no block of "
                           f"{block} answer tokens; shorten the prompt", "prompt")
    return min(default, room)


def _field_named(message: str, body: dict) -> str | None:
    """The request's field an option error is about (the error's ``param``): of the fields the
    body set, the one ``message`` names first; None when it names none (a server default's)."""
    places = [(found.start(), key) for key in (*DLLM_OPTIONS, "temperature", "top_p") if key in body
              and (found := re.search(rf"\b{key}\b", message))]
    return min(places)[1] if places else None


def _n(body: dict) -> int:
    n = body.get("n", 1)
    n = 1 if n is None else n
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_N:
        raise RequestError(f"n must be an integer in [1, {MAX_N}], got {n!r}", "n")
    return n


def _seed(body: dict) -> int:
    """The request's seed, or a fresh random one (as OpenAI and vLLM draw): the response reports
    it (``dllm.seed``), so sending it back replays the request."""
    seed = body.get("seed")
    if seed is None:
        return secrets.randbits(63)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise RequestError(f"seed must be an integer in [0, 2**63), got {seed!r}", "seed")
    return seed


def _logprobs(body: dict, chat: bool) -> int | None:
    """None (no logprobs) or how many top alternatives to report with each answer token.
    Completions: ``logprobs`` is that count; chat: ``logprobs`` true, ``top_logprobs`` the count."""
    value = body.get("logprobs")
    if chat:
        top = body.get("top_logprobs")
        if value is None or value is False:
            if top is not None:
                raise RequestError("top_logprobs needs logprobs=true", "top_logprobs")
            return None
        if value is not True:
            raise RequestError(f"logprobs must be true or false, got {value!r}", "logprobs")
        value, field = (0 if top is None else top), "top_logprobs"
    else:
        if value is None:
            return None
        field = "logprobs"
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOP_LOGPROBS:
        raise RequestError(f"{field} must be an integer in [0, {MAX_TOP_LOGPROBS}], got {value!r}", field)
    return value


def _check_prompt_logprobs(model) -> None:
    """echo with logprobs scores the prompt in one forward with the answer masked
    (``dllm/serve/prompt_logprobs.py``): refused where that forward does not exist."""
    if getattr(model, "tensor_parallel", None) is not None:
        raise RequestError("echo with logprobs needs the prompt's logprobs, which a tensor-parallel server does "
                           "not compute; drop echo or logprobs", "echo")
    if getattr(model, "uniform_state", False):
        raise RequestError("echo with logprobs scores the prompt with the answer masked, and a uniform-state model "
                           "has no mask token; drop echo or logprobs (the answer's own logprobs are served)", "echo")


def _check_lengths(prompt_ids: list[list[int]], config: GenerationConfig, max_tokens: int, field: str,
                   context: int, chat: bool = False) -> None:
    """Every prompt's tokens + the answer's positions (max_tokens rounded up to whole blocks)
    within the model's context, said in the API's fields: the fault is ``field``'s when the
    answer alone leaves no room for a prompt, else the prompt's (chat: the messages')."""
    answer = config.gen_length if max_tokens else 0  # max_tokens 0 (echo): no answer positions
    source = "messages" if chat else "prompt"
    for i, ids in enumerate(prompt_ids):
        if not ids:
            raise RequestError(f"prompt {i} is empty; a request needs at least one token", "prompt")
        total = len(ids) + answer
        if total > context:
            rounded = "" if answer == max_tokens else (
                f" (rounded up to {answer}, whole blocks of {config.block_length})")
            lower = f" or lower {field}" if max_tokens else ""
            what = f"the messages have {len(ids)} tokens" if chat else f"prompt {i} has {len(ids)} tokens"
            raise RequestError(f"{what} + {field} {max_tokens}{rounded} = {total} > the model's context of "
                               f"{context}; shorten the {source}{lower}", field if answer >= context else source)


def _check_budget(model, prompt_length: int, config: GenerationConfig, field: str) -> None:
    """A row of the longest prompt, decoded alone, within ``memory_budget_mb``."""
    if config.memory_budget_mb is None:
        return
    need = one_row_mib(model.model, prompt_length, config)
    if need > config.memory_budget_mb:
        raise RequestError(f"one row of this request ({prompt_length} prompt tokens + {config.gen_length} answer "
                           f"positions) needs {need:.1f} MiB but memory_budget_mb is "
                           f"{config.memory_budget_mb:g}: it could never be served; lower {field}, shorten the "
                           "prompt or raise memory_budget_mb", "memory_budget_mb")
