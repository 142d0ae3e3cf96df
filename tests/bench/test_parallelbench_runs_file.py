"""``dllm bench parallelbench --runs FILE``: the file sets every run's options, so the options that
build --policy runs are refused beside it, as --gen-length is, instead of being ignored; an empty
file is named as such."""
from __future__ import annotations

import json

import pytest

from dllm.bench.parallelbench_cli import build_runs
from dllm.cli import build_parser

RUN = {"name": "k4", "line": "top-k", "options": {"policy": "low_confidence"}, "tokens_per_step": 4}


def _args(*argv: str):
    return build_parser().parse_args(["bench", "parallelbench", "--out", "o", *argv])


@pytest.mark.parametrize("flags", [["--policy", "threshold"], ["--policy", "threshold", "--policy-arg", "tau=0.9"],
                                   ["--tokens-per-step", "1", "2"], ["--block-length", "8"], ["--cache", "dual"],
                                   ["--strategy", "lopa"], ["--stopper", "sched"]])
def test_policy_run_options_beside_a_runs_file_are_refused(tmp_path, flags):
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([RUN]))
    with pytest.raises(ValueError) as err:
        build_runs(_args("--runs", str(path), *flags))
    assert flags[0] in str(err.value) and "--runs" in str(err.value)
    (run,) = build_runs(_args("--runs", str(path)))  # the file alone: its runs as written
    assert (run.name, run.options, run.tokens_per_step) == ("k4", {"policy": "low_confidence"}, 4)


def test_an_empty_runs_file_is_named(tmp_path):
    path = tmp_path / "runs.json"
    path.write_text("[]")
    with pytest.raises(ValueError, match=f"--runs {path} holds no runs"):
        build_runs(_args("--runs", str(path)))
