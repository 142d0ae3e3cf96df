"""``dllm chat --system TEXT``: a system message before the conversation (llama.cpp's
``--system-prompt``, ollama's ``/set system``), sent with every turn and kept across ``/reset``."""
from __future__ import annotations

import io

import pytest

import dllm
from dllm.cli import main

ARGS = ["--no-live", "--gen-length", "16", "--block-length", "8"]
SYSTEM = "Reverse every list you are given."


@pytest.fixture(scope="module")
def lm():
    return dllm.load()


def _answers(lm, turns: list[str | None]) -> list[str]:
    """generate's answers to each turn with the system message first (None: a /reset)."""
    history, answers = [], []
    for text in turns:
        if text is None:
            history = []
            continue
        history.append({"role": "user", "content": text})
        answers.append(lm.generate([{"role": "system", "content": SYSTEM}, *history], gen_length=16,
                                   block_length=8).texts[0])
        history.append({"role": "assistant", "content": answers[-1]})
    return answers


def test_the_system_message_leads_every_turn_and_outlives_reset(lm, monkeypatch, capsys):
    turns = ['["Ann Lee", "Bo Kim"]', "again", None, '["Ann Lee", "Bo Kim"]']
    expected = _answers(lm, turns)
    without = lm.generate([{"role": "user", "content": turns[0]}], gen_length=16, block_length=8).texts[0]
    assert expected[0] != without  # the system message changes the answer: the check below can fail
    monkeypatch.setattr("dllm.load", lambda *a, **k: lm)
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join("/reset" if t is None else t for t in turns) + "\n"))
    assert main(["chat", *ARGS, "--system", SYSTEM]) == 0
    assert capsys.readouterr().out == "".join(a + "\n" for a in expected)


def test_an_empty_system_message_is_refused_before_loading(monkeypatch, capsys):
    def no_load(*args, **kwargs):
        raise AssertionError("loaded")

    monkeypatch.setattr("dllm.load", no_load)
    assert main(["chat", "--system", " "]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dllm chat: error: ") and "--system" in err


def test_a_system_message_past_the_context_is_told_to_be_shorter(lm, monkeypatch, capsys):
    context = lm.model.config.max_sequence_length
    system = "Ann Lee, " * context
    monkeypatch.setattr("dllm.load", lambda *a, **k: lm)
    monkeypatch.setattr("sys.stdin", io.StringIO("hi\n"))
    assert main(["chat", *ARGS, "--system", system]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "shorten --system" in captured.err and f"context is {context}" in captured.err
