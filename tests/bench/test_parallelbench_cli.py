"""``dllm bench parallelbench``'s options: choices that name the flag at fault, one label per run,
a summary legend with "-" for a score never reached, --max-tokens as the canvas that holds it."""
from __future__ import annotations

import pytest

from dllm.bench.parallelbench_cli import pb_value, run_label
from dllm.cli import build_parser, main


def _args(*argv: str):
    return build_parser().parse_args(["bench", "parallelbench", "--out", "o", *argv])


@pytest.mark.parametrize("flag, value, meant", [("--cache", "dul", "dual"), ("--strategy", "lopaa", "lopa"),
                                                ("--stopper", "shed", "sched"), ("--policy", "treshold", "threshold")])
def test_bad_names_are_refused_naming_the_flag(capsys, flag, value, meant):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "parallelbench", "--out", "o", flag, value])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith(f"dllm bench parallelbench: error: argument {flag}: ")
    assert f"did you mean {meant!r}?" in err and "--runs" not in err


def test_help_gives_every_option_a_help_line_and_default(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "parallelbench", "--help"])
    out = capsys.readouterr().out
    for option in ("--cache CACHE", "--strategy STRATEGY", "--stopper STOPPER", "--batch-size"):
        help_text = " ".join(out.split("\n  " + option, 1)[1].split("\n  --", 1)[0].split())  # unwrapped
        assert "(default: " in help_text, (option, help_text)
    assert "0 for the bundled models" not in out and "one-shot for waiting-line" in out


def test_max_tokens_is_the_canvas_of_whole_blocks_that_holds_it():
    from dllm.bench.parallelbench_cli import build_runs

    runs = build_runs(_args("--max-tokens", "10", "--block-length", "8"))
    assert [r.gen_length for r in runs] == [16]
    with pytest.raises(ValueError, match="not both"):
        build_runs(_args("--max-tokens", "10", "--gen-length", "16"))


def test_summary_labels_and_values():
    from dllm.bench.parallelbench_cli import build_runs

    runs = build_runs(_args("--policy", "threshold", "--policy-arg", "tau=0.9"))
    assert run_label(runs[0].line) == runs[0].name == "threshold_tau=0.9"  # one label in both tables
    assert pb_value(0.0) == "-" and pb_value(2.345) == "2.35"
