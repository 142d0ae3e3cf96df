"""Prompts that are not UTF-8 reach the CLI as stdin or as argv; either way the command prints one
``dllm <command>: error:`` line naming the source (and the first bad byte of stdin) with exit
status 2, before any model is loaded, where it was a 30-line tokenizer traceback."""
from __future__ import annotations

import importlib
import io

import pytest

from dllm.cli import main

BAD = b"ab\xff\xfecd\n"  # bytes 2 and 3 are no UTF-8


def _stdin(strict: bool) -> io.TextIOBase:
    """stdin as Python opens it: strict under a UTF-8 locale, surrogateescape under the C locale."""
    return io.TextIOWrapper(io.BytesIO(BAD), encoding="utf-8", errors="strict" if strict else "surrogateescape")


@pytest.fixture(autouse=True)
def no_model(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("the model was loaded before the input was checked")
    monkeypatch.setattr(importlib.import_module("dllm.cli.main"), "load_from_args", refuse)


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("argv", [["generate", "-"], ["generate", "--prompts-file", "-"]])
def test_stdin_that_is_not_utf8_names_its_first_bad_byte(monkeypatch, capsys, argv, strict):
    monkeypatch.setattr("sys.stdin", _stdin(strict))
    assert main([*argv, "--max-tokens", "4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dllm generate: error: stdin is not UTF-8 (byte 2: invalid start byte)"), err
    assert err.count("\n") == 1, err


def test_a_prompt_argument_read_from_bad_bytes_is_named(capsys):
    argument = BAD.decode("utf-8", "surrogateescape").strip()  # how Python hands such argv to main
    assert main(["generate", "fine", argument, "--max-tokens", "4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dllm generate: error: prompt argument 2 holds U+DCFF at character 2"), err
    assert err.count("\n") == 1, err
