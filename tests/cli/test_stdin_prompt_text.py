"""The prompt argument ``-`` is all of stdin as one prompt, lines and all, without the newline
that ends it (``echo hi | dllm generate -`` asks "hi") and without a byte-order mark."""
from __future__ import annotations

import io

import pytest

from dllm.cli.prompts import read_stdin_prompt


@pytest.mark.parametrize("stdin, prompt", [("hi\n", "hi"), ("a\nb\n", "a\nb"), ("a\n\n", "a\n"), ("hi", "hi"),
                                           ("\ufeffhi\n", "hi")])
def test_stdin_is_one_prompt_without_its_last_newline(monkeypatch, stdin, prompt):
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert read_stdin_prompt() == prompt
