"""Checks of what a user hands to ``generate()``: prompts, chat messages and token ids.

Each check raises before any model work, with the prompt (and message or token) at fault and
the form that is expected, instead of a TypeError from deep inside the tokenizer or an
IndexError from the embedding.
"""
from __future__ import annotations

import numbers
from typing import Any, Sequence

from dllm.validation import OptionTypeError

PROMPT_FORMS = ("a string, a list of chat messages ({'role': ..., 'content': ...} dicts), "
                "or a list of those")


def prompt_batch(prompts: Any) -> list[str | list[dict[str, str]]]:
    """One prompt or a list of prompts -> a list of prompts (strings or message lists)."""
    if isinstance(prompts, str):
        return [check_text(prompts, "prompt 0")]
    if is_messages(prompts):
        return [check_messages(prompts, 0)]
    if isinstance(prompts, (bytes, bytearray)):
        raise OptionTypeError("prompts are bytes; decode them to str first (e.g. prompt.decode('utf-8'))")
    if not isinstance(prompts, (list, tuple)):
        raise OptionTypeError(f"prompts must be {PROMPT_FORMS}; got {type(prompts).__name__}")
    if not prompts:
        raise ValueError("no prompts given; pass at least one prompt")
    if all(isinstance(p, numbers.Integral) for p in prompts) or all(is_token_ids(p) for p in prompts):
        raise OptionTypeError("prompts are text or chat messages; these are token ids, which "
                              "model.generate_ids([[id, ...], ...]) takes (one list of ids per prompt)")
    batch = []
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, str):
            batch.append(check_text(prompt, f"prompt {i}"))
        elif is_messages(prompt):
            batch.append(check_messages(prompt, i))
        elif isinstance(prompt, (list, tuple)) and not prompt:
            raise ValueError(f"prompt {i} is an empty list; a chat prompt needs at least one message "
                             "({'role': 'user', 'content': '...'})")
        else:
            raise OptionTypeError(f"prompt {i} is {type(prompt).__name__}; each prompt must be a string "
                                  "or a list of chat messages ({'role': ..., 'content': ...} dicts)")
    return batch


def is_token_ids(value: Any) -> bool:
    """A non-empty list of ints: one prompt's token ids."""
    return (isinstance(value, (list, tuple)) and len(value) > 0
            and all(isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in value))


def is_messages(value: Any) -> bool:
    """A non-empty list of dicts: one chat conversation."""
    return isinstance(value, (list, tuple)) and len(value) > 0 and isinstance(value[0], dict)


def check_messages(messages: Sequence[Any], prompt: int) -> list[dict[str, str]]:
    """Every message is a dict with string ``role`` and ``content``; an assistant turn that
    called tools (``tool_calls``, OpenAI's form) may have no content."""
    for j, message in enumerate(messages):
        where = f"prompt {prompt}, message {j}"
        if not isinstance(message, dict):
            raise OptionTypeError(f"{where} is {type(message).__name__}; chat messages are "
                                  "{'role': 'user', 'content': '...'} dicts")
        called = message.get("role") == "assistant" and message.get("tool_calls")
        if called and not isinstance(message["tool_calls"], list):
            raise OptionTypeError(f"{where}: 'tool_calls' must be a list of calls, got "
                                  f"{type(message['tool_calls']).__name__}")
        for key in ("role",) if called and message.get("content") is None else ("role", "content"):
            if key not in message:
                raise ValueError(f"{where} has no {key!r}; chat messages are "
                                 "{'role': 'user', 'content': '...'} dicts")
            if not isinstance(message[key], str):
                raise OptionTypeError(f"{where}: {key!r} must be a string, got "
                                      f"{type(message[key]).__name__}")
            check_text(message[key], f"{where}: {key!r}")
    return list(messages)


def check_text(text: str, where: str) -> str:
    """``text`` when it is valid Unicode; a lone surrogate (what Python makes of bytes that are
    not UTF-8 read from stdin, argv or a file with ``surrogateescape``) is a ValueError naming its
    place, instead of the tokenizer's TypeError about ``TextEncodeInput``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"{where} holds U+{ord(text[err.start]):04X} at character {err.start}, a lone surrogate "
                         "and no character: the text was read from bytes that are not UTF-8; decode it as UTF-8 "
                         "(bytes.decode('utf-8', errors='replace') keeps the rest of a damaged text)") from None
    return text


def check_token_ids(ids: Any, vocab_size: int) -> list[list[int]]:
    """A list of prompts, each a non-empty list of integer ids in [0, vocab_size)."""
    shape = "token ids must be a list of prompts, each a list of int ids (e.g. [[1, 2, 3]]; a tensor or array: ids.tolist())"
    if not isinstance(ids, (list, tuple)):
        raise OptionTypeError(f"{shape}; got {type(ids).__name__}")
    for i, row in enumerate(ids):
        if not isinstance(row, (list, tuple)):
            raise OptionTypeError(f"{shape}; prompt {i} is {type(row).__name__}")
    for i, row in enumerate(ids):
        for j, token in enumerate(row):
            if not isinstance(token, numbers.Integral) or isinstance(token, bool):
                raise OptionTypeError(f"prompt {i}, token {j} is {token!r} ({type(token).__name__}); "
                                      "token ids are ints (nothing is rounded)")
            if not 0 <= token < vocab_size:
                raise ValueError(f"prompt {i}, token {j} is id {token}, outside the model's vocabulary "
                                 f"[0, {vocab_size}); encode prompts with this checkpoint's tokenizer")
    return [[int(t) for t in row] for row in ids]
