"""Ctrl-C on a real terminal (a pseudo-terminal): ``dllm chat`` cancels the line being typed or
the answer in progress and keeps the conversation, a second Ctrl-C ends it with status 0;
``dllm generate`` ends with one line and status 130 (its long decode showing a bar of tokens
first). No traceback anywhere."""
from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import sys
import termios
import time

import pytest

import dllm

DEADLINE_S = 240  # the whole session of one test, model load included (a shared CPU is slow)
SHORT = ["--max-tokens", "8", "--block-length", "8"]


class Terminal:
    """``python -m dllm ARGV`` on a pseudo-terminal it has as controlling terminal, so ``\\x03``
    is the SIGINT of a person pressing Ctrl-C."""

    def __init__(self, argv: list[str]) -> None:
        env = {**os.environ, "PYTHONPATH": os.getcwd(), "TERM": "xterm", "DLLM_DEVICE": "cpu"}
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: its own session, the pty as stdin, stdout and stderr
            # Ctrl-C as a shell gives its foreground job: the default action (a suite started in
            # the background, e.g. `pytest &`, would hand down an ignored SIGINT, which Python keeps)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.execve(sys.executable, [sys.executable, "-m", "dllm", *argv], env)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))  # 40 x 160, as a window
        self.deadline = time.monotonic() + DEADLINE_S
        self.output, self.seen = "", 0

    def expect(self, text: str) -> str:
        """Everything printed from the last expectation up to and including ``text``."""
        while text not in self.output[self.seen:]:
            left = self.deadline - time.monotonic()
            assert left > 0, f"no {text!r} within {DEADLINE_S} s; printed:\n{self.output}"
            if select.select([self.fd], [], [], min(left, 1.0))[0]:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:  # EIO: the child closed the terminal
                    chunk = b""
                assert chunk, f"exited before printing {text!r}; printed:\n{self.output}"
                self.output += chunk.decode(errors="replace")
        end = self.output.index(text, self.seen) + len(text)
        chunk, self.seen = self.output[self.seen:end], end
        return chunk

    def send(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def type_at_prompt(self, keys: str) -> None:
        """Type ``keys`` once readline reads the terminal (it turns canonical mode off when it does)
        and a moment more: a Ctrl-C typed before that, while the prompt is still being set up,
        reaches the process before readline waits for a key and is seen only at the next key, a
        race a person at the keyboard never runs (a test typing at machine speed does)."""
        end = time.monotonic() + 10
        while termios.tcgetattr(self.fd)[3] & termios.ICANON and time.monotonic() < end:
            time.sleep(0.01)
        time.sleep(0.3)
        self.send(keys)

    def exit_status(self) -> int:
        while time.monotonic() < self.deadline:
            if select.select([self.fd], [], [], 0.2)[0]:
                try:
                    self.output += os.read(self.fd, 4096).decode(errors="replace")
                except OSError:
                    pass
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
        raise AssertionError(f"still running after {DEADLINE_S} s; printed:\n{self.output}")

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(self.fd)


@pytest.fixture
def terminal():
    opened = []

    def spawn(argv: list[str]) -> Terminal:
        opened.append(Terminal(argv))
        return opened[-1]

    yield spawn
    for term in opened:
        term.close()


def test_ctrl_c_in_chat_cancels_the_line_or_the_answer_and_keeps_the_conversation(terminal):
    lm = dllm.load()
    first, later = "Copy: Ann Lee", "Reverse: Cy Dunn, Di Ely"
    answer = lm.generate(first, max_tokens=8, block_length=8).texts[0]
    history = [{"role": "user", "content": first}, {"role": "assistant", "content": answer},
               {"role": "user", "content": later}]
    expected = lm.generate(history, max_tokens=8, block_length=8).texts[0]
    assert expected != lm.generate(later, max_tokens=8, block_length=8).texts[0]  # it shows the history was kept

    term = terminal(["chat", *SHORT])
    assert "dllm-waitingline-llada on cpu (float32)" in term.expect("> ")  # the banner
    term.send(first + "\r")
    term.expect("| NFE")
    term.expect("> ")
    term.type_at_prompt("half a line\x03")  # Ctrl-C while typing: the line is dropped
    term.expect("(line cancelled")
    term.expect("> ")
    term.send("/set max-tokens=200 block-length=200\r")
    term.expect("> ")
    term.send("Copy: Bo Kim, Cy Dunn\r")
    term.expect("\x1b[K")  # the live line is drawing: the answer is in progress
    term.send("\x03")
    term.expect("(answer cancelled")
    term.expect("> ")
    term.send("/set max-tokens=8 block-length=8\r")
    term.expect("> ")
    term.send(later + "\r")
    assert expected.replace("\n", "\r\n") in term.expect("| NFE")  # the first turn is still in the history
    term.expect("> ")
    term.type_at_prompt("x\x03")
    term.expect("(line cancelled")
    term.expect("> ")
    term.type_at_prompt("\x03")  # a second Ctrl-C in a row ends the session
    assert term.exit_status() == 0
    assert "Traceback" not in term.output and "KeyboardInterrupt" not in term.output


def test_ctrl_c_during_generate_is_one_line_and_status_130(terminal):
    term = terminal(["generate", "-v", "Copy: Ann Lee", "--max-tokens", "448", "--block-length", "448",
                     "--cfg-scale", "1"])  # two forwards a step: well over a second on any CPU
    assert "block_length=448" in term.expect("decoding 1 prompt")  # -v: the resolved configuration
    term.expect("/448 [")  # after a second, a bar of the answer's tokens committed
    term.send("\x03")
    assert term.exit_status() == 130
    assert "dllm generate: interrupted" in term.output
    assert "Traceback" not in term.output and "KeyboardInterrupt" not in term.output
