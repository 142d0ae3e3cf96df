"""Every usage error of every command is one ``dllm <command>: error:`` line naming the fix, with a
"did you mean" for near misses, a pointer to --help and exit status 2; Ctrl-C is one line, 130."""
from __future__ import annotations

import pytest

from dllm.cli import main


def _usage_error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line, no usage block
    return err


@pytest.mark.parametrize("argv, prefix, expected", [
    (["generate", "--policy", "low_confidance", "hi"], "dllm generate", "did you mean 'low_confidence'?"),
    (["generate", "--cache", "dualx", "hi"], "dllm generate", "did you mean 'dual'?"),
    (["chat", "--strategy", "freedav"], "dllm chat", "did you mean 'freedave'?"),
    (["serve", "--stopper", "prophit"], "dllm serve", "did you mean 'prophet'?"),
    (["generate", "--max-tokens", "-1", "hi"], "dllm generate", "must be a positive integer, got -1"),
    (["generate", "--n", "0", "hi"], "dllm generate", "must be a positive integer, got 0"),
    (["bench", "parallelbench"], "dllm bench parallelbench", "required: --out"),
    (["generate", "--stream", "hi"], "dllm generate", "unknown option '--stream'"),
    (["generate", "--max-new-tokens", "5", "hi"], "dllm generate", "did you mean '--max-tokens'?"),
    (["chat", "--block_length", "8"], "dllm chat", "did you mean '--block-length'?"),
    (["models", "--jsn"], "dllm models", "did you mean '--json'?"),
    (["generat", "hi"], "dllm", "unknown command 'generat' (did you mean 'generate'?)"),
])
def test_usage_errors_are_one_line_naming_the_command_and_the_fix(capsys, argv, prefix, expected):
    err = _usage_error(capsys, argv)
    assert err.startswith(f"{prefix}: error: ") and expected in err
    assert err.rstrip().endswith(f"(see {prefix} --help)")


def test_a_far_miss_gets_no_suggestion(capsys):
    err = _usage_error(capsys, ["generate", "--cache", "zzzzzz", "hi"])
    assert "did you mean" not in err and "one of: adaptive, dual, encoder, none, prefix" in err


def test_ctrl_c_outside_chat_is_one_line_and_status_130(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("dllm.load", interrupted)
    assert main(["generate", "hi"]) == 130
    captured = capsys.readouterr()
    assert captured.err.strip() == "dllm generate: interrupted" and "Traceback" not in captured.err


def test_a_prefix_of_two_names_of_one_option_is_that_option():
    from dllm.cli import build_parser

    args = build_parser().parse_args(["bench", "throughput", "--prompt", "p.txt", "--out", "o"])
    assert args.prompts == "p.txt"
