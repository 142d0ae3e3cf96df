"""`dllm chat > file`: the prompt marker goes to stderr when stdout is not a terminal, so the file
holds only the answers; at a terminal it stays on stdout (input's own, for line editing)."""
import importlib
import io

import pytest

cli_main = importlib.import_module("dllm.cli.main")  # `from dllm.cli import main` is the function


class _Out(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("stdout_is_tty", [False, True])
def test_marker_is_never_written_into_a_redirected_stdout(monkeypatch, stdout_is_tty):
    out, err = _Out(stdout_is_tty), _Out(False)
    monkeypatch.setattr("sys.stdout", out)
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))
    assert cli_main.ask("> ") == "hello"
    assert (out.getvalue(), err.getvalue()) == (("> ", "") if stdout_is_tty else ("", "> "))
