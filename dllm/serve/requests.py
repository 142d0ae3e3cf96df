"""An OpenAI request body -> the rows to decode, validated before any model work.

OpenAI fields (prompt or messages, max_tokens, n, seed, temperature, top_p, stop, echo,
stream) map onto dllm's: ``max_tokens`` becomes the smallest block-aligned gen_length (the
answer is cut at max_tokens), ``n`` becomes ``n`` rows with distinct seeds. dllm's own options
(policy, cache, strategy, their args, block_length, steps, ...) come as extra body fields, on
top of the server's defaults, and go through GenerationConfig and the policy registries: a bad
request is a ``RequestError`` (HTTP 400) with the reason.
"""
from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from typing import Any

from dllm.config import GenerationConfig, block_aligned_gen_length, sample_seeds
from dllm.inputs import check_messages, check_token_ids
from dllm.stops import StopConditions

# dllm's options a request may set as extra body fields (gen_length comes from max_tokens)
DLLM_OPTIONS = ("policy", "policy_args", "strategy", "strategy_args", "stopper", "stopper_args",
                "cache", "cache_args", "sub_block_length", "block_length", "steps", "top_k",
                "cfg_scale", "stop_at_eos", "memory_budget_mb")
COMMON_FIELDS = {"model", "max_tokens", "n", "seed", "temperature", "top_p", "stop", "stop_token_ids",
                 "stream", "stream_options", "user"}
COMPLETION_FIELDS = COMMON_FIELDS | {"prompt", "echo"}
CHAT_FIELDS = COMMON_FIELDS | {"messages", "max_completion_tokens"}
# OpenAI fields dllm does not implement: accepted only at their neutral value, never ignored
UNSUPPORTED = {"logprobs": (None, False, 0), "top_logprobs": (None, 0), "best_of": (None, 1),
               "presence_penalty": (None, 0), "frequency_penalty": (None, 0), "logit_bias": (None, {}),
               "suffix": (None, ""), "tools": (None, []), "tool_choice": (None, "none"),
               "response_format": (None, {"type": "text"})}
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

    @property
    def n(self) -> int:
        return len(self.seeds)


@dataclass(kw_only=True, slots=True)
class ServerDefaults:
    """Server-wide defaults (from the command line): GenerationConfig options a request may
    override, and max_tokens when a request gives none."""

    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    max_tokens: int = 128


def parse_request(body: Any, model, defaults: ServerDefaults, *, chat: bool, served_name: str) -> ParsedRequest:
    """Validate ``body`` for /v1/chat/completions (``chat``) or /v1/completions."""
    if not isinstance(body, dict):
        raise RequestError(f"the request body must be a JSON object, got {type(body).__name__}")
    _check_fields(body, CHAT_FIELDS if chat else COMPLETION_FIELDS, chat)
    name = body.get("model")
    if name is not None and name != served_name:
        raise RequestError(f"the model {name!r} does not exist; this server serves {served_name!r}",
                           "model", status=404)
    prompt_ids, prompt_texts = _chat_prompt(body, model) if chat else _completion_prompts(body, model)
    stream = _flag(body, "stream")
    stream_options = body.get("stream_options")
    if stream_options is not None and (not isinstance(stream_options, dict) or set(stream_options) - {"include_usage"}):
        raise RequestError('stream_options must be {"include_usage": true|false}', "stream_options")
    include_usage = _flag(stream_options or {}, "include_usage")
    if include_usage and not stream:
        raise RequestError("stream_options is only allowed with stream=true", "stream_options")
    config, max_tokens = _config(body, defaults, chat)
    seeds = _seeds(body, config)
    try:
        stops = StopConditions.parse(body.get("stop"), body.get("stop_token_ids"),
                                     vocab_size=model.model.config.vocab_size)
    except ValueError as err:
        raise RequestError(str(err), "stop") from None
    _check_lengths(prompt_ids, config, model)
    return ParsedRequest(chat=chat, prompt_ids=prompt_ids, prompt_texts=prompt_texts, config=config,
                         seeds=seeds, max_tokens=max_tokens, stops=stops, stream=stream,
                         include_usage=include_usage, echo=_flag(body, "echo"))


def _check_fields(body: dict, allowed: set[str], chat: bool) -> None:
    for key, neutral in UNSUPPORTED.items():
        if key in body and body[key] not in neutral:
            raise RequestError(f"{key} is not supported by dllm; leave it out", key)
    unknown = sorted(set(body) - allowed - set(DLLM_OPTIONS) - set(UNSUPPORTED))
    if "gen_length" in unknown:
        raise RequestError("set the answer length with max_tokens (dllm rounds it up to whole blocks)", "gen_length")
    if unknown:
        other = "prompt (use /v1/completions)" if chat else "messages (use /v1/chat/completions)"
        wrong = "prompt" if chat else "messages"
        if unknown == [wrong]:
            raise RequestError(f"this endpoint takes {'messages' if chat else 'prompt'}, not {other}", wrong)
        raise RequestError(f"unknown field(s) {unknown}; dllm options: {sorted(DLLM_OPTIONS)}", unknown[0])


def _flag(body: dict, key: str) -> bool:
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RequestError(f"{key} must be true or false, got {value!r}", key)
    return value


def _completion_prompts(body: dict, model) -> tuple[list[list[int]], list[str]]:
    """``prompt``: a string, a list of strings, a list of token ids or a list of those."""
    prompt = body.get("prompt")
    if prompt is None:
        raise RequestError("prompt is required", "prompt")
    vocab = model.model.config.vocab_size
    if isinstance(prompt, str):
        prompts: list[Any] = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(t, numbers.Integral) and not isinstance(t, bool)
                                                     for t in prompt):
        prompts = [prompt]
    elif isinstance(prompt, list) and prompt:
        prompts = prompt
    else:
        raise RequestError("prompt must be a non-empty string, a list of strings or a list of token ids", "prompt")
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


def _chat_prompt(body: dict, model) -> tuple[list[list[int]], list[str]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list of {'role': ..., 'content': ...} objects", "messages")
    try:
        messages = check_messages(messages, 0)
        row = model.encode(messages, chat=True)
    except ValueError as err:
        raise RequestError(str(err).replace("prompt 0, ", "", 1), "messages") from None
    return [row], [model.tokenizer.decode(row, skip_special_tokens=False)]


def _config(body: dict, defaults: ServerDefaults, chat: bool) -> tuple[GenerationConfig, int]:
    """The request's GenerationConfig: server defaults, then the request's fields."""
    options = dict(defaults.options)
    options.pop("gen_length", None)
    options.update({k: body[k] for k in DLLM_OPTIONS if k in body})
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            options[key] = body[key]
    key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = body.get(key)
    max_tokens = defaults.max_tokens if max_tokens is None else max_tokens
    try:
        options["gen_length"] = block_aligned_gen_length(max_tokens, options.get("block_length"))
    except ValueError as err:
        raise RequestError(str(err).replace("max_tokens", key, 1), key) from None
    if options.get("steps") is not None and "steps" not in body and options["gen_length"] != defaults.max_tokens:
        options["steps"] = None  # the server's step budget was for its default length
    try:
        config = GenerationConfig(**options)
        from dllm.policies import check_policies

        check_policies(config)
    except (TypeError, ValueError) as err:
        raise RequestError(str(err)) from None
    return config, max_tokens


def _seeds(body: dict, config: GenerationConfig) -> list[int]:
    n = body.get("n", 1)
    n = 1 if n is None else n
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_N:
        raise RequestError(f"n must be an integer in [1, {MAX_N}], got {n!r}", "n")
    seed = body.get("seed")
    seed = config.seed if seed is None else seed
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise RequestError(f"seed must be an integer in [0, 2**63), got {seed!r}", "seed")
    return sample_seeds(seed, n)


def _check_lengths(prompt_ids: list[list[int]], config: GenerationConfig, model) -> None:
    from dllm.engine import check_prompts

    try:
        check_prompts(prompt_ids, config, model.model.config.max_sequence_length)
    except ValueError as err:
        raise RequestError(str(err).replace("gen_length", "max_tokens rounded to whole blocks", 1), "prompt") from None
