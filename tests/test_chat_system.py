"""``dllm chat --system TEXT``: a system message before the conversation (llama.cpp's
``--system-prompt``, ollama's ``/set system``), sent with every turn and kept across ``/reset``;
``dllm generate --system TEXT`` (``-sys``): one before every prompt."""
from __future__ import annotations

import io
import json

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


def _no_load(*args, **kwargs):
    raise AssertionError("loaded")


def test_generate_puts_the_system_message_before_every_prompt(lm, monkeypatch, capsys, tmp_path):
    """Prompt arguments and a prompts file's lines (a chat list without a system message of its
    own) decode as generate's [system, *messages] of each."""
    prompts = ['["Ann Lee", "Bo Kim"]', '["Cy Dunn", "Di Ely", "Ed Fox"]']
    system = [{"role": "system", "content": SYSTEM}]
    users = [[{"role": "user", "content": p}] for p in prompts]
    expected = [lm.generate(system + u, gen_length=16, block_length=8).texts[0] for u in users]
    without = [lm.generate(u, gen_length=16, block_length=8).texts[0] for u in users]
    assert expected != without  # the system message changes an answer: the checks below can fail
    monkeypatch.setattr("dllm.load", lambda *a, **k: lm)
    for flag in ("--system", "-sys"):
        assert main(["generate", *prompts, "--gen-length", "16", "--block-length", "8", flag, SYSTEM]) == 0
        assert capsys.readouterr().out == "".join(a + "\n" for a in expected)
    lines = tmp_path / "prompts.jsonl"
    lines.write_text(json.dumps({"messages": users[0]}) + "\n" + json.dumps({"prompt": prompts[1]}) + "\n")
    assert main(["generate", "--prompts-file", str(lines), "--gen-length", "16", "--block-length", "8",
                 "--system-prompt", SYSTEM]) == 0
    assert capsys.readouterr().out == "".join(a + "\n" for a in expected)


@pytest.mark.parametrize("argv, words", [
    (["generate", "x", "--system", " "], "--system is empty"),
    (["generate", "x", "--system", SYSTEM, "--raw"], "which --raw turns off"),
    (["generate", "--prompts-file", "FILE", "--system", SYSTEM], "line 1 opens with a system message of its own"),
])
def test_generate_refuses_a_system_message_it_cannot_send_before_loading(monkeypatch, capsys, tmp_path, argv, words):
    lines = tmp_path / "prompts.jsonl"
    lines.write_text(json.dumps({"messages": [{"role": "system", "content": "be kind"},
                                              {"role": "user", "content": "hi"}]}) + "\n")
    monkeypatch.setattr("dllm.load", _no_load)
    assert main([str(lines) if a == "FILE" else a for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dllm generate: error: ") and words in err


def test_generate_system_needs_a_chat_template(lm, monkeypatch, capsys):
    monkeypatch.setattr("dllm.load", lambda *a, **k: lm)
    monkeypatch.setattr(lm.tokenizer, "chat_template", None)
    assert main(["generate", "x", "--system", SYSTEM, "--max-tokens", "8"]) == 2
    err = capsys.readouterr().err
    assert "has no chat template; --system needs one" in err
