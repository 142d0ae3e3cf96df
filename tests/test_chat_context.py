"""``dllm chat`` and the model's context: an answer length that leaves no room for a message is
refused when given (at start, at ``/set``), and a turn that does not fit says what to do in a
chat: shorten the message when it is the first, ``/reset`` when the conversation grew too long."""
from __future__ import annotations

import io

import pytest

import dllm
from dllm.cli import main

ARGS = ["--no-live", "--block-length", "8"]


@pytest.fixture(scope="module")
def lm():
    return dllm.load()


def _chat(lm, monkeypatch, capsys, stdin: str, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr("dllm.load", lambda *a, **k: lm)
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    status = main(["chat", *ARGS, *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_a_max_tokens_past_the_context_is_refused_at_start(lm, monkeypatch, capsys):
    context = lm.model.config.max_sequence_length
    status, out, err = _chat(lm, monkeypatch, capsys, "Copy: Ann Lee\n", "--max-tokens", str(context))
    assert status == 2 and out == ""  # no turn was tried
    assert err.startswith("dllm chat: error: --max-tokens ") and err.count("\n") == 1, err
    assert f"context of {context}" in err


def test_a_set_past_the_context_is_refused_and_the_settings_kept(lm, monkeypatch, capsys):
    context = lm.model.config.max_sequence_length
    expected = lm.generate([{"role": "user", "content": "Copy: Ann Lee"}], max_tokens=16, block_length=8).texts[0]
    status, out, err = _chat(lm, monkeypatch, capsys, f"/set max-tokens={context}\nCopy: Ann Lee\n", "--max-tokens", "16")
    assert status == 1 and out == expected + "\n"  # piped: the failed /set shows in the exit status
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and f"context of {context}" in errors[0] and errors[0].endswith("options unchanged")


def _message_of(lm, share: float) -> str:
    """A message whose templated tokens take about ``share`` of the model's context."""
    context = lm.model.config.max_sequence_length
    text = "Ann Lee"
    while len(lm.encode([{"role": "user", "content": text}], True)) < share * context:
        text += ", Ann Lee"
    return text


def test_a_conversation_past_the_context_is_told_to_reset_and_goes_on_after(lm, monkeypatch, capsys):
    context = lm.model.config.max_sequence_length
    message = _message_of(lm, 0.45)
    history = [{"role": "user", "content": message}]
    first = lm.generate(history, max_tokens=64, block_length=8).texts[0]
    history += [{"role": "assistant", "content": first}, {"role": "user", "content": message}]
    assert len(lm.encode(history, True)) + 64 > context  # the second turn cannot fit
    status, out, err = _chat(lm, monkeypatch, capsys, f"{message}\n{message}\n/reset\n{message}\n", "--max-tokens", "64")
    assert status == 1 and out == f"{first}\n{first}\n"  # the turn past the context left no trace (piped: status 1)
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and "conversation" in errors[0] and "/reset" in errors[0], errors
    assert f"context of {context}" in errors[0] and "gen_length" not in errors[0]


def test_a_first_message_past_the_context_is_told_to_be_shorter(lm, monkeypatch, capsys):
    message = _message_of(lm, 0.95)
    status, out, err = _chat(lm, monkeypatch, capsys, f"{message}\n", "--max-tokens", "64")
    assert status == 1 and out == ""
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and "shorten the message" in errors[0] and "/reset" not in errors[0], errors
