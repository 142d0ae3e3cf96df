"""Prompts files for the commands (``dllm generate --prompts-file``, ``dllm bench throughput
--prompts-file``): one reader, one format, errors that name the file's line.

Format: one prompt per line. A ``.jsonl`` or ``.json`` file (or stdin, ``-``, whose first line is
a JSON object) holds one object per line with ``"prompt"`` (text) or ``"messages"`` (a chat list of
{"role", "content"}); any other file holds plain text lines. Blank lines are skipped but
counted, so a line number in an error is the line in the editor.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BOM = "\ufeff"  # the byte-order mark some editors put before UTF-8 text
JSON_SUFFIXES = (".jsonl", ".json")  # a .json file holds JSON too: read as lines, never as raw text
STDIN = "-"  # a prompts file, or a prompt argument, read from stdin
JSONL_HELP = 'one JSON object per line with "prompt" (text) or "messages" (a chat list)'


@dataclass(frozen=True, slots=True)
class PromptLine:
    """One prompt and where it came from."""

    source: str  # the file name, "stdin", or "argument" (a prompt given on the command line)
    line: int  # 1-based line number in the source (the argument's position)
    prompt: Any  # str, or a list of {"role", "content"} messages

    @property
    def where(self) -> str:
        return f"prompt argument {self.line}" if self.source == "argument" else f"{self.source} line {self.line}"


def read_prompts(path: str | Path) -> list[PromptLine]:
    """Every prompt of a prompts file (``-``: stdin), in order; a clear error on bad input."""
    if str(path) == STDIN:
        source, text = "stdin", read_stdin()
    else:
        source = str(path)
        file = Path(path)
        if not file.is_file():
            raise FileNotFoundError(f"prompts file {source} does not exist (or is not a file); "
                                    "pass a text file with one prompt per line, or .jsonl")
        try:
            text = file.read_text(encoding="utf-8-sig")  # UTF-8, its byte-order mark (if any) dropped
        except UnicodeDecodeError as err:
            raise ValueError(f"prompts file {source} is not UTF-8 (byte {err.start}: {err.reason}); "
                             "save it as UTF-8") from None
    lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not lines:
        raise ValueError(f"{source} holds no prompt; write one prompt per line (text), or {JSONL_HELP} (.jsonl)")
    jsonl = source.endswith(JSON_SUFFIXES) or (source == "stdin" and lines[0][1].lstrip().startswith("{"))
    if not jsonl:
        return [PromptLine(source, n, line) for n, line in lines]
    return [PromptLine(source, n, _jsonl_prompt(source, n, line)) for n, line in lines]


def read_stdin_prompt() -> str:
    """The prompt argument ``-``: all of stdin as one prompt (lines and all, as ``cat`` gives it),
    without the newline that ends it, so ``echo hi | dllm generate -`` asks "hi"."""
    text = read_stdin().removesuffix("\n")
    if not text.strip():
        raise ValueError("the prompt argument - reads stdin, which held no text; pipe the prompt in "
                         "(echo PROMPT | dllm generate -), or use --prompts-file - for one prompt per line")
    return text


def read_stdin() -> str:
    """All of stdin as text, its byte-order mark dropped; bytes that are not UTF-8 are one error
    naming the first, as for a prompts file. Python reads stdin strictly under a UTF-8 locale and
    with ``surrogateescape`` under the C locale (bad bytes become lone surrogates): both are caught."""
    try:
        text = sys.stdin.read()
        text.encode("utf-8", "surrogateescape").decode("utf-8")  # a surrogateescape'd byte fails here
    except UnicodeError as err:
        start = f"byte {err.start}: {err.reason}" if isinstance(err, UnicodeDecodeError) else err.reason
        raise ValueError(f"stdin is not UTF-8 ({start}); pipe UTF-8 text (iconv -f LATIN1 -t UTF-8 "
                         "converts Latin-1)") from None
    return text.removeprefix(BOM)


def _jsonl_prompt(source: str, n: int, line: str) -> Any:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"{source} line {n} is not valid JSON ({err.msg}); write {JSONL_HELP}") from None
    if not isinstance(row, dict):
        raise ValueError(f"{source} line {n} is a JSON {type(row).__name__}, not an object; write {JSONL_HELP}")
    if isinstance(row.get("prompt"), str) and row["prompt"].strip():
        return row["prompt"]
    messages = row.get("messages")
    if isinstance(messages, list) and messages and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages
    ):
        return messages
    if "prompt" in row or "messages" in row:
        raise ValueError(f'{source} line {n}: "prompt" must be non-empty text and "messages" a non-empty list '
                         'of {"role": ..., "content": ...}; fix that line')
    raise ValueError(f'{source} line {n} has no "prompt" or "messages" (keys: {sorted(row)}); write {JSONL_HELP}')


def echo_text(prompt: Any, *, raw: bool) -> str:
    """What ``--echo`` prints before an answer: the prompt as written (a chat list: its messages'
    contents, one per line); a chat answer starts on the next line, a raw continuation right after."""
    text = prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)
    return text if raw else text + "\n"


def with_system(prompts: list[PromptLine], system: str | None) -> list[PromptLine]:
    """``prompts`` with the system message ``system`` before each (None: as they are); a chat list
    that opens with a system message of its own is refused (two would be sent)."""
    if system is None:
        return prompts
    lead = [{"role": "system", "content": system}]
    out = []
    for p in prompts:
        if isinstance(p.prompt, str):
            out.append(PromptLine(p.source, p.line, lead + [{"role": "user", "content": p.prompt}]))
            continue
        if p.prompt and p.prompt[0].get("role") == "system":
            raise ValueError(f"{p.where} opens with a system message of its own, and --system gives another; "
                             "drop --system or that line's system message")
        out.append(PromptLine(p.source, p.line, lead + list(p.prompt)))
    return out


def refuse_messages_under_raw(prompts: list[PromptLine]) -> None:
    """``--raw`` sends text without the chat template, which a chat list of messages needs."""
    for p in prompts:
        if not isinstance(p.prompt, str):
            raise ValueError(f'{p.where} holds "messages", which need the chat template that --raw turns off; '
                             'write that line as {"prompt": TEXT} or drop --raw')


def check_prompt_lengths(model, prompts: list[PromptLine], config, chat: bool | None,
                         length_flag: str = "--gen-length") -> list[list[int]]:
    """Token ids of every prompt, each checked against the model's context before any decoding;
    an error names the prompt's line in its file and ``length_flag``, the option that set the
    answer canvas' length."""
    from dllm.engine.decoding import check_prompts

    context = model.model.config.max_sequence_length
    ids = []
    for p in prompts:
        row = model.encode(p.prompt, chat)
        if len(row) + config.gen_length > context:
            raise ValueError(f"{p.where}: the prompt has {len(row)} tokens + an answer canvas of {config.gen_length} "
                             f"= {len(row) + config.gen_length} > the model's context of {context}; "
                             f"shorten the prompt or lower {length_flag}")
        try:
            check_prompts([row], config, context)  # the engine's other checks (an empty prompt)
        except ValueError as err:
            raise ValueError(f"{p.where}: {str(err).replace('prompt 0 ', 'the prompt ', 1)}") from None
        ids.append(row)
    return ids
