"""``dllm chat``: a terminal REPL over ``DiffusionLM.stream`` with multi-turn history.

Each turn sends the whole conversation through the chat template. Live display (the default on
a terminal) redraws one line as the canvas fills: the final text so far, then the rest of the
answer with masked positions shown as ``MASK_GLYPH`` (pipelined decodes: up to the last block
in flight, each block's start marked with ``BLOCK_GLYPH``); the turn ends with its final text. Without
it (pipes, ``--no-live``) the final text is printed left to right as it becomes final.
A message of several lines goes between triple double quotes (``QUOTE``, as in ollama), so a
pasted prompt is one turn. Commands: ``/reset`` (forget the conversation), ``/set key=value`` (a
generation option for the next turns, ``cli.chat_settings``; ``key value`` too), ``/show`` (the
settings), ``/exit`` (or end of input), ``/help``, and ollama's ``/bye``, ``/clear``, ``/?``;
``--system`` sends a system message before every turn.
Ctrl-C cancels the answer in progress (or the line being typed) and keeps the conversation; a
second Ctrl-C in a row, or Ctrl-D, ends the session. With piped input (a script's turns) Ctrl-C
ends the command as it ends any other (``dllm chat: interrupted``, status 130).
"""
from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field
from typing import Any, Callable, TextIO

from dllm.cli.chat_context import check_answer_room, check_conversation_fits
from dllm.cli.chat_settings import ChatSettings, SET_EXAMPLES, setting_name, split_settings
from dllm.cli.output import LOGGER_NAME
from dllm.cli.parser import did_you_mean
from dllm.engine.config import GenerationConfig

log = logging.getLogger(LOGGER_NAME)

PROG = "dllm chat"
MASK_GLYPH = "_"
BLOCK_GLYPH = "|"  # where a block in flight begins (pipelined decodes)
QUOTE = '"""'  # opens and closes a message of several lines, as in ollama
COMMANDS = ("/reset", "/set", "/show", "/exit", "/quit", "/help")
OLLAMA_COMMANDS = {"/bye": "/exit", "/clear": "/reset", "/?": "/help"}  # what ollama's users type
HELP = (f"commands: /reset (forget the conversation), /set key=value (a generation option, {SET_EXAMPLES}), "
        f"/show (the settings), /exit (or Ctrl-D), /help; {QUOTE} opens and closes a message of several lines; "
        "Ctrl-C cancels an answer")


@dataclass
class ChatSession:
    """The conversation and the options of the next turns."""

    model: Any  # a DiffusionLM
    settings: ChatSettings
    out: TextIO
    live: bool
    history: list[dict[str, str]] = field(default_factory=list)
    system: str | None = None  # a system message before the conversation, kept across /reset
    errors: int = 0  # turns and commands that failed (piped input then exits 1)
    interactive: bool = True  # a person at a prompt (piped input: Ctrl-C ends the command)

    def messages(self) -> list[dict[str, str]]:
        """What a turn sends: the system message, if any, then the conversation."""
        return ([{"role": "system", "content": self.system}] if self.system else []) + self.history

    def handle(self, line: str) -> bool:
        """One input line (a command or a user message); False ends the session."""
        text = line.strip()
        if text.startswith("/"):
            return self._command(text)
        return self.say(text)

    def say(self, text: str) -> bool:
        """One user message (a blank one is skipped): its turn answered, or its error shown."""
        if not text.strip():
            return True
        self.history.append({"role": "user", "content": text})
        try:
            answer = self._answer()
        except (ValueError, RuntimeError) as err:  # bad input, or a decode that failed (out of memory, ...)
            self.history.pop()  # the conversation stays as it was before the failed turn
            self._error(str(err), exc_info=log.isEnabledFor(logging.DEBUG) and isinstance(err, RuntimeError))
            return True
        except KeyboardInterrupt:  # Ctrl-C: the turn is cancelled, the conversation before it kept
            self.history.pop()
            self.out.write("\r\x1b[K" if self.live else "\n")
            self.out.flush()
            if self.interactive:
                log.info("(answer cancelled, the conversation kept; Ctrl-C again or Ctrl-D to exit)")
            raise
        self.history.append({"role": "assistant", "content": answer})
        return True

    def _command(self, text: str) -> bool:
        name, _, rest = text.partition(" ")
        name = OLLAMA_COMMANDS.get(name, name)
        if name in ("/exit", "/quit"):
            return False
        if name == "/reset":
            self.history.clear()
            log.info("(conversation cleared)")
        elif name == "/set" and rest.strip():
            self._set(rest)
        elif name in ("/show", "/set"):  # /set alone shows what it can change
            log.info("%s", self.settings.show(shutil.get_terminal_size().columns - 1))
        elif name == "/help":
            log.info("%s", HELP)
        else:
            self._error(f"unknown command {name!r}{did_you_mean(name, COMMANDS)}; {HELP}")
        return True

    def _set(self, text: str) -> None:
        """Apply key=value options if the config they make is valid; otherwise keep the old ones."""
        text = _one_setting(text)
        try:
            settings = self.settings.updated(text)
            check_answer_room(self.model, settings.config(), settings.length_setting(), "/set max-tokens=",
                              self.system)
            self.settings = settings
        except (ValueError, TypeError) as err:
            self._error(f"{err}; options unchanged")
            return
        log.info("(set %s)", ", ".join(setting_name(pair.split("=", 1)[0]) + "=" + pair.split("=", 1)[1]
                                      for pair in split_settings(text)))

    def _answer(self) -> str:
        config = self.settings.config()
        check_conversation_fits(self.model, self.messages(), config)
        show = _LiveLine(self.out, self._token_text, self.model.model.mask_token_id,
                         set(self.model.model.eos_token_ids)) if self.live else None
        final = None
        # the block as an option: on the config alone, one equal to its gen_length would follow max_tokens
        for update in self.model.stream(self.messages(), config, chat=True, max_tokens=self.settings.max_tokens,
                                        block_length=config.block_length):
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

    def status(self, interactive: bool) -> int:
        """The exit status: 1 when input that was not typed at a prompt had a turn or command fail."""
        return 1 if self.errors and not interactive else 0

    def _error(self, message: str, exc_info: bool = False) -> None:
        """A turn's or a command's error, read as the CLI's others (``dllm chat: error: ...``),
        and counted; the session goes on."""
        self.errors += 1
        log.error("%s", message, exc_info=exc_info, extra={"prog": PROG})


def _one_setting(text: str) -> str:
    """``key value`` (ollama's ``/set parameter key value`` too) as ``key=value``; other text as given."""
    words = text.split()
    if words[:1] == ["parameter"]:
        words = words[1:]
    return f"{words[0]}={words[1]}" if len(words) == 2 and "=" not in text else text


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


def redraws_in_place(out: TextIO) -> bool:
    """The live line's default: ``out`` is a terminal that moves the cursor (TERM=dumb, as an
    editor's shell buffer, prints the escape codes as text)."""
    return out.isatty() and os.environ.get("TERM") != "dumb"


def banner(model) -> str:
    """The first line of an interactive chat: which model, where, in which dtype."""
    weights = model.model
    dtype = str(weights.dtype).removeprefix("torch.")
    return f"dllm chat: {model.path.name} on {weights.device} ({dtype}); /help for commands, Ctrl-D to exit"


def require_chat_template(model, needed_by: str) -> None:
    """Refuse a model whose tokenizer has no chat template: a chat's turns (``needed_by``: what
    asks for them) need one."""
    if model.tokenizer.chat_template is None:
        raise ValueError(f"the tokenizer in {model.path} has no chat template; {needed_by} needs one "
                         "(give one with --chat-template, or use dllm generate --raw for plain text)")


def read_quoted(first: str, read_more: Callable[[], str]) -> str:
    """The message that ``first`` opens with ``QUOTE``: its lines up to the one that ends with
    ``QUOTE``, joined by newlines (the end of input ends it too)."""
    lines = [first.lstrip()[len(QUOTE):]]
    while not lines[-1].rstrip().endswith(QUOTE):
        try:
            lines.append(read_more())
        except EOFError:
            return "\n".join(lines).strip()
    lines[-1] = lines[-1].rstrip()[: -len(QUOTE)]
    return "\n".join(lines).strip()


def run_chat(model, config: GenerationConfig, *, live: bool, read_line: Callable[[], str], out: TextIO,
             max_tokens: int | None = None, interactive: bool = False,
             read_more: Callable[[], str] | None = None, system: str | None = None,
             options: dict[str, Any] | None = None, default_block: int | None = None) -> int:
    """The REPL: read lines until /exit, end of input or a second Ctrl-C in a row. ``interactive``:
    a person types at a prompt, so leaving ends the prompt's line; otherwise (piped input, a
    script) the exit status is 1 when a turn or command failed, as a command's is, and Ctrl-C
    raises KeyboardInterrupt (the CLI's one line and status 130). A line that starts with
    ``QUOTE`` opens a message of several lines, read with ``read_more`` (default: ``read_line``;
    a continuation prompt) up to the line that ends with ``QUOTE``: one turn, never a command.
    ``system``: a system message sent before the conversation at every turn; ``options``: the
    command line's options kept as given when the answer length changes (``cli.options.given_block``);
    ``default_block``: the block when no option sets one (``ChatSettings``)."""
    require_chat_template(model, "dllm chat")
    settings = ChatSettings(config, dict(options or {}), max_tokens=max_tokens, model=model.model,
                            default_block=default_block)
    session = ChatSession(model=model, settings=settings, out=out, live=live, system=system, interactive=interactive)
    interrupted = False  # the last key was a Ctrl-C: another one ends the session
    while True:
        try:  # a Ctrl-C anywhere in the loop lands here, between two lines as well
            try:
                line = read_line()
                quoted = read_quoted(line, read_more or read_line) if line.lstrip().startswith(QUOTE) else None
            except KeyboardInterrupt:
                if not interactive:  # input a script pipes in: Ctrl-C ends the command (below)
                    raise
                out.write("\n")  # the prompt's line ends where ^C was typed
                out.flush()
                if not interrupted:
                    log.info("(line cancelled; Ctrl-C again or Ctrl-D to exit)")
                raise
            interrupted = False
            if not (session.say(quoted) if quoted is not None else session.handle(line)):
                return session.status(interactive)
        except EOFError:  # Ctrl-D, or the end of piped input
            break
        except KeyboardInterrupt:  # the line or the answer was cancelled, the conversation kept
            if not interactive:  # piped turns: the command is interrupted (its CLI line, status 130), as any other
                raise
            if interrupted:
                return 0
            interrupted = True
    if interactive:
        out.write("\n")
        out.flush()
    return session.status(interactive)
