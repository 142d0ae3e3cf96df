"""``dllm generate``: flags that contradict each other, or that the other flags leave without
effect, are refused before the model loads with one line naming the fix; size flags name
themselves when they are not positive; a prompt past the context names the flag that sets the
answer's length."""
from __future__ import annotations

import json

import pytest

from dllm.cli import main


def _refused_before_loading(capsys, monkeypatch, argv: list[str]) -> str:
    """The one error line of ``argv``, checked to come before any model is loaded."""
    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the options were checked")

    monkeypatch.setattr("dllm.load", no_load)
    try:
        status = main(argv)
    except SystemExit as exit_:  # argparse's own refusals
        status = exit_.code
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith("dllm generate: error: ") and err.count("\n") == 1, err
    return err


def test_echo_and_echo_template_are_refused_together(capsys, monkeypatch):
    err = _refused_before_loading(capsys, monkeypatch, ["generate", "hi", "--echo", "--echo-template"])
    assert "--echo" in err and "--echo-template" in err and "not both" in err


def test_a_prompt_taken_by_choice_is_named_with_the_fix(capsys, monkeypatch):
    """``--choice`` takes every word after it, so a prompt written after the choices became one."""
    err = _refused_before_loading(capsys, monkeypatch, ["generate", "--choice", "yes", "no", "Is it raining?"])
    assert "'Is it raining?'" in err and "--choice" in err and "--" in err.split("--choice", 1)[1]


def test_decoded_token_threshold_without_the_pipelined_mode_is_refused(capsys, monkeypatch, tmp_path):
    err = _refused_before_loading(capsys, monkeypatch, ["generate", "hi", "--decoded-token-threshold", "0.5"])
    assert "--decoded-token-threshold" in err and "--block-add-threshold" in err
    prompts = tmp_path / "p.txt"
    prompts.write_text("hi\n")
    argv = ["bench", "throughput", "--prompts-file", str(prompts), "--out", str(tmp_path / "out"),
            "--decoded-token-threshold", "0.5"]  # one config for every prompt too
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("dllm bench throughput: error: --decoded-token-threshold") and "--block-add-threshold" in err


@pytest.mark.parametrize("flag", ["--gen-length", "--block-length", "--steps", "--sub-block-length", "--top-k"])
@pytest.mark.parametrize("value", ["0", "-4"])
def test_a_size_that_is_not_positive_names_its_flag(capsys, monkeypatch, flag, value):
    err = _refused_before_loading(capsys, monkeypatch, ["generate", "hi", flag, value])
    assert f"argument {flag}: must be a positive integer, got {value}" in err


def test_messages_under_raw_are_refused_naming_the_line(tmp_path, capsys, monkeypatch):
    """``--raw`` sends text without the chat template; a messages line cannot be sent that way."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "plain"}) + "\n" + json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    err = _refused_before_loading(capsys, monkeypatch, ["generate", "--prompts-file", str(prompts), "--raw"])
    assert f"{prompts} line 2" in err and "--raw" in err and '"prompt"' in err


@pytest.mark.parametrize("length, flag", [(["--max-tokens", "600"], "--max-tokens"),
                                          (["--gen-length", "600"], "--gen-length")])
def test_a_prompt_past_the_context_names_the_length_flag_given(capsys, length, flag):
    import dllm

    context = dllm.load().model.config.max_sequence_length
    assert context < 600 + 2
    assert main(["generate", "hi", *length]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dllm generate: error: prompt argument 1: the prompt has ") and err.count("\n") == 1, err
    assert f"context of {context}" in err and err.rstrip().endswith(f"lower {flag}"), err
    assert "gen_length" not in err


def test_stray_words_are_explained_by_what_the_command_takes(capsys):
    """A command without a prompt says it takes options only; generate, whose prompts were split
    by an option, says where prompts go (the words were quoted: quoting is not the fix)."""
    for argv, expected in ((["models", "extra"], "dllm models takes options only"),
                           (["serve", "model", "extra"], "dllm serve takes one MODEL and options only"),
                           (["generate", "one", "--json", "two"], "before or after the options")):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.count("\n") == 1 and expected in err, err
        assert ("quotes" in err) == (argv[0] == "generate")
