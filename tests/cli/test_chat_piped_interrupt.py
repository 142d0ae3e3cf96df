"""Ctrl-C in ``dllm chat`` fed by a pipe (a script's turns) ends the command as it ends every other
command: one ``dllm chat: interrupted`` line and status 130, never "cancelled, the conversation
kept" and a status 0 after the rest of the piped turns. At a prompt it still cancels the answer
(tests/test_chat_terminal.py)."""
from __future__ import annotations

import io

import pytest

import dllm
from dllm.cli import main
from dllm.cli.chat import run_chat

FIRST = "Copy: Ann Lee"


class InterruptedPipe(io.StringIO):
    """Piped stdin whose second line never comes: the person running the script pressed Ctrl-C."""

    def __init__(self) -> None:
        super().__init__(FIRST + "\n")
        self.lines = 0

    def readline(self, *args) -> str:
        self.lines += 1
        if self.lines > 1:
            raise KeyboardInterrupt
        return super().readline(*args)


def test_ctrl_c_ends_a_piped_chat_with_status_130(monkeypatch, capsys):
    pipe = InterruptedPipe()
    monkeypatch.setattr("sys.stdin", pipe)
    assert main(["chat", "--no-live", "--max-tokens", "8", "--block-length", "8"]) == 130
    captured = capsys.readouterr()
    expected = dllm.load().generate([{"role": "user", "content": FIRST}], max_tokens=8, block_length=8).texts[0]
    assert captured.out == expected + "\n"  # the turn before the Ctrl-C was answered
    assert "dllm chat: interrupted" in captured.err and "line cancelled" not in captured.err
    assert pipe.lines == 2  # nothing read after it


@pytest.mark.parametrize("interactive, outcome", [(False, KeyboardInterrupt), (True, 0)])
def test_an_answer_interrupted_mid_decode_ends_only_piped_sessions(monkeypatch, interactive, outcome):
    """A Ctrl-C during a turn's decode: piped input raises it on (to the CLI's 130); at a prompt
    the turn is cancelled and the session reads its next line (here: end of input, status 0)."""
    lm = dllm.load()

    def interrupted_stream(*args, **kwargs):
        raise KeyboardInterrupt
        yield  # a generator, as model.stream is

    monkeypatch.setattr(lm, "stream", interrupted_stream)
    lines = iter([FIRST])

    def read_line() -> str:
        try:
            return next(lines)
        except StopIteration:
            raise EOFError from None

    config = dllm.GenerationConfig(gen_length=8, block_length=8)
    if outcome is KeyboardInterrupt:
        with pytest.raises(KeyboardInterrupt):
            run_chat(lm, config, live=False, read_line=read_line, out=io.StringIO(), interactive=interactive)
    else:
        assert run_chat(lm, config, live=False, read_line=read_line, out=io.StringIO(), interactive=interactive) == 0
