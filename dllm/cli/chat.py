"""``dllm chat``: a terminal REPL over ``DiffusionLM.stream`` with multi-turn history.

Each turn sends the whole conversation through the chat template. Live display (the default on
a terminal) redraws one line as the canvas fills: the final text so far, then the rest of the
answer with masked positions shown as ``MASK_GLYPH`` (pipelined decodes: up to the last block
in flight, each block's start marked with ``BLOCK_GLYPH``); the turn ends with its final text. Without
it (pipes, ``--no-live``) the final text is printed left to right as it becomes final.
Commands: ``/reset`` (forget the conversation), ``/set key=value`` (a generation option for the
next turns), ``/exit`` (or end of input), ``/help``.
"""
from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from typing import Any, Callable, TextIO

from dllm.cli.options import parse_kv
from dllm.cli.output import LOGGER_NAME
from dllm.engine.config import GenerationConfig
from dllm.api.request import merge_config

log = logging.getLogger(LOGGER_NAME)

MASK_GLYPH = "_"
BLOCK_GLYPH = "|"  # where a block in flight begins (pipelined decodes)
HELP = ("commands: /reset (forget the conversation), /set key=value (a generation option, e.g. "
        "/set temperature=0.7), /exit (or end of input), /help")


@dataclass
class ChatSession:
    """The conversation and the options of the next turns."""

    model: Any  # a DiffusionLM
    config: GenerationConfig
    out: TextIO
    live: bool
    history: list[dict[str, str]] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)

    def handle(self, line: str) -> bool:
        """One input line (a command or a user message); False ends the session."""
        text = line.strip()
        if not text:
            return True
        if text.startswith("/"):
            return self._command(text)
        self.history.append({"role": "user", "content": text})
        try:
            answer = self._answer()
        except ValueError as err:
            self.history.pop()  # the conversation stays as it was before the failed turn
            log.error("%s", err)
            return True
        self.history.append({"role": "assistant", "content": answer})
        return True

    def _command(self, text: str) -> bool:
        name, _, rest = text.partition(" ")
        if name in ("/exit", "/quit"):
            return False
        if name == "/reset":
            self.history.clear()
            log.info("(conversation cleared)")
        elif name == "/set" and rest.strip():
            self._set(rest.split())
        elif name == "/help":
            log.info("%s", HELP)
        else:
            log.error("unknown command %r; %s", text, HELP)
        return True

    def _set(self, pairs: list[str]) -> None:
        """Apply key=value options if the config they make is valid; otherwise keep the old ones."""
        malformed = [p for p in pairs if "=" not in p]
        if malformed:
            log.error("expected key=value, got %r (e.g. /set temperature=0.7); options unchanged", malformed[0])
            return
        try:
            options = {**self.options, **parse_kv(pairs)}
            merge_config(self.config, options)
        except (ValueError, TypeError) as err:
            log.error("%s; options unchanged", err)
            return
        self.options = options
        log.info("(set %s)", ", ".join(f"{k}={v!r}" for k, v in parse_kv(pairs).items()))

    def _answer(self) -> str:
        config = merge_config(self.config, self.options)
        show = _LiveLine(self.out, self._token_text, self.model.model.mask_token_id,
                         set(self.model.model.eos_token_ids)) if self.live else None
        final = None
        for update in self.model.stream(self.history, config, chat=True):
            if show is not None:
                show.draw(update.final_text, update.canvas, len(update.final_ids),
                          update.in_flight if update.pipelined else None)
            elif update.text_delta:
                self.out.write(update.text_delta)
                self.out.flush()
            final = update
        if show is not None:
            show.clear()
        self.out.write((final.final_text if show is not None else "") + "\n")
        self.out.flush()
        stats = final.stats or {}
        log.info("[%s | NFE %s | TPF %.2f | %.2f s]", final.finish_reason, stats.get("nfe"),
                 stats.get("tpf", 0.0), stats.get("seconds", 0.0))
        return final.final_text

    def _token_text(self, token: int) -> str:
        return self.model.tokenizer.decode([token], skip_special_tokens=False)


class _LiveLine:
    """One terminal line redrawn in place: the final text, then the rest of the canvas."""

    def __init__(self, out: TextIO, token_text: Callable[[int], str], mask_id: int, eos_ids: set[int]) -> None:
        self.out, self.token_text, self.mask_id, self.eos_ids = out, token_text, mask_id, eos_ids

    def draw(self, final_text: str, canvas: list[int], final_length: int,
             in_flight: list[tuple[int, int]] | None = None) -> None:
        """``in_flight`` (pipelined decodes): the blocks being decoded; the line then ends with the
        last of them and shows where each begins with ``BLOCK_GLYPH``."""
        rest = []
        starts = {s for s, _ in in_flight or ()}
        end = max((e for _, e in in_flight), default=len(canvas)) if in_flight else len(canvas)
        for at in range(final_length, end):
            token = canvas[at]
            if token in self.eos_ids:
                break  # the answer ends here (or will, once the masks before it are filled)
            if at in starts and at > final_length:
                rest.append(BLOCK_GLYPH)
            rest.append(MASK_GLYPH if token == self.mask_id else self.token_text(token))
        rest = "".join(rest)
        line = (final_text + rest).replace("\n", " ")
        width = shutil.get_terminal_size().columns - 1
        self.out.write("\r\x1b[K" + line[:width])
        self.out.flush()

    def clear(self) -> None:
        self.out.write("\r\x1b[K")


def run_chat(model, config: GenerationConfig, *, live: bool, read_line: Callable[[], str], out: TextIO) -> int:
    """The REPL: read lines until /exit or end of input."""
    if model.tokenizer.chat_template is None:
        raise ValueError(f"the tokenizer in {model.path} has no chat template; dllm chat needs one "
                         "(use dllm generate --raw for plain text)")
    session = ChatSession(model=model, config=config, out=out, live=live)
    while True:
        try:
            line = read_line()
        except EOFError:
            return 0
        if not session.handle(line):
            return 0
