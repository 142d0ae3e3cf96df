"""`dllm chat > file`: the prompt marker goes to stderr when stdout is not a terminal, so the file
holds only the answers; at a terminal it stays on stdout (input's own, for line editing)."""
import importlib
import io

cli_main = importlib.import_module("dllm.cli.main")  # `from dllm.cli import main` is the function


class _Out(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_marker_goes_to_stderr_when_stdout_is_a_file(monkeypatch):
    out, err = _Out(False), _Out(False)
    monkeypatch.setattr("sys.stdout", out)
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))
    assert cli_main.ask("> ") == "hello"
    assert out.getvalue() == "" and err.getvalue() == "> "


def test_marker_stays_on_a_terminal_stdout(monkeypatch):
    out, err = _Out(True), _Out(False)
    monkeypatch.setattr("sys.stdout", out)
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr("sys.stdin", io.StringIO("hi\n"))
    assert cli_main.ask("> ") == "hi"
    assert out.getvalue() == "> " and err.getvalue() == ""
