"""``dllm chat``'s /set and /show: the command line's names (dashes or underscores), dotted keys
into option dicts, JSON values with spaces, max-tokens; a bad change keeps the old settings."""
from __future__ import annotations

import io

import pytest

import dllm
from dllm.cli import main
from dllm.cli.chat import run_chat
from dllm.cli.chat_settings import ChatSettings, split_settings
from dllm.engine.config import GenerationConfig

BASE = GenerationConfig(gen_length=16, block_length=8)


@pytest.mark.parametrize("text, parts", [
    ("a=1 b=2", ["a=1", "b=2"]),
    ('policy_args={"tau": 0.5, "x": [1, 2]}  seed=3', ['policy_args={"tau": 0.5, "x": [1, 2]}', "seed=3"]),
    ('s="a b" t=\'c d\'', ['s="a b"', "t='c d'"]),
    ('s="say \\"hi there\\"" u=1', ['s="say \\"hi there\\""', "u=1"]),
])
def test_split_keeps_quoted_and_bracketed_spaces(text, parts):
    assert split_settings(text) == parts


@pytest.mark.parametrize("text", ["block-length=4", "--block-length=4", "block_length=4"])
def test_set_takes_the_command_lines_names(text):
    assert ChatSettings(BASE).updated(text).config().block_length == 4


def test_set_takes_dotted_keys_and_json_with_spaces():
    settings = ChatSettings(BASE).updated('policy=threshold policy_args={"tau": 0.5}')
    assert settings.config().policy_args == {"tau": 0.5}
    settings = settings.updated("policy_args.tau=0.7 policy-arg.budget_cap=true")
    assert settings.config().policy_args == {"tau": 0.7, "budget_cap": True}


def test_max_tokens_and_gen_length_replace_each_other():
    settings = ChatSettings(BASE).updated("max-tokens=10")
    assert (settings.max_tokens, settings.config().gen_length) == (10, 16)  # two blocks of 8 hold 10
    settings = settings.updated("gen_length=24")
    assert (settings.max_tokens, settings.config().gen_length) == (None, 24)
    assert settings.updated("max_tokens=3").config().gen_length == 8


@pytest.mark.parametrize("text, message", [
    ("temperature", "expected key=value, got 'temperature'"),
    ("blok-length=8", "did you mean 'block_length'?"),
    ("block_length=5", "not a multiple of block_length"),
    ("policy=threshold policy_args.tau=high", "tau"),
    ("seed.x=1", "seed is not a dict of options"),
    ("max-tokens=0", "max_tokens must be a positive int"),
])
def test_bad_set_is_refused_naming_what_to_change(text, message):
    settings = ChatSettings(BASE)
    with pytest.raises((ValueError, TypeError), match=message):
        settings.updated(text)
    assert settings.options == {} and settings.max_tokens is None


def test_show_lists_every_setting_of_the_next_turn():
    shown = ChatSettings(BASE).updated("temperature=0.5 max-tokens=12").show(width=60)
    assert all(len(line) <= 60 for line in shown.splitlines())
    assert "max_tokens=12" in shown and "temperature=0.5" in shown and "block_length=8" in shown
    assert "gen_length=16" in shown  # the canvas that holds max_tokens


def test_end_of_input_at_a_prompt_ends_its_line():
    lm = dllm.load()
    out = io.StringIO()

    def ctrl_d() -> str:
        raise EOFError

    assert run_chat(lm, BASE, live=False, read_line=ctrl_d, out=out, interactive=True) == 0
    assert out.getvalue() == "\n"


def test_an_unknown_command_gets_the_one_meant(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("/shwo\n/nothing-like-it\n"))
    assert main(["chat", "--no-live"]) == 1  # piped lines that failed
    err = capsys.readouterr().err
    assert "unknown command '/shwo' (did you mean '/show'?)" in err
    assert "unknown command '/nothing-like-it';" in err
