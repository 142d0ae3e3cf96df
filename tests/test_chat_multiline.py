"""``dllm chat`` takes a message of several lines between triple quotes, as ollama does: a pasted
multi-line prompt is one turn, not one turn per line."""
from __future__ import annotations

import io

import pytest

import dllm
from dllm.cli.chat import run_chat
from tests.chat_helpers import line_reader

GEN = dict(gen_length=16, block_length=8)


@pytest.fixture(scope="module")
def lm():
    return dllm.load()


def _answers(lm, messages: list[str]) -> list[str]:
    """What generate answers for each user message given the conversation before it."""
    history, answers = [], []
    for text in messages:
        history.append({"role": "user", "content": text})
        answers.append(lm.generate(history, **GEN).texts[0])
        history.append({"role": "assistant", "content": answers[-1]})
    return answers


def test_lines_between_triple_quotes_are_one_message(lm):
    prompt = 'Reverse the list:\n["Ann Lee", "Bo Kim"]\nonly the list.'
    lines = ['"""Reverse the list:', '["Ann Lee", "Bo Kim"]', 'only the list."""', "again"]
    out = io.StringIO()
    assert run_chat(lm, dllm.GenerationConfig(**GEN), live=False, read_line=line_reader(lines), out=out) == 0
    assert out.getvalue() == "".join(a + "\n" for a in _answers(lm, [prompt, "again"]))


def test_quotes_on_their_own_lines_and_a_slash_inside_are_message_text(lm):
    lines = ['"""', "/reset is not a command here", "second line", '"""']
    out = io.StringIO()
    assert run_chat(lm, dllm.GenerationConfig(**GEN), live=False, read_line=line_reader(lines), out=out) == 0
    assert out.getvalue() == _answers(lm, ["/reset is not a command here\nsecond line"])[0] + "\n"
