"""``python -m dllm.eval --model dllm`` reads ``--model_args`` before lm-eval loads any task: a
misspelt key or a bad value is one ``python -m dllm.eval: error:`` line (with a "did you mean"
for a near miss) and exit status 2, where it was a traceback after the tasks' datasets loaded."""
from __future__ import annotations

import sys

import pytest

pytest.importorskip("lm_eval")
from lm_eval._cli import HarnessCLI  # noqa: E402

import dllm.eval.__main__ as eval_main  # noqa: E402
from dllm.eval.model_args import parse_model_args  # noqa: E402


@pytest.mark.parametrize("model_args, expected", [
    ({"gen_lenght": 8}, "unknown model_args key 'gen_lenght' (did you mean 'gen_length'?)"),
    ({"policy": "threshold", "taw": 0.9}, "unknown model_args key 'taw' (did you mean 'tau'?)"),
    ({"zzzzzz": 1}, "unknown model_args key 'zzzzzz'; known keys"),
])
def test_an_unknown_key_names_the_nearest_known_one(model_args, expected):
    with pytest.raises(ValueError) as err:
        parse_model_args(model_args)
    assert str(err.value).startswith(expected), err.value


def _main(monkeypatch, capsys, *argv: str) -> tuple[int | None, str, bool]:
    """Exit status (None: ran on), stderr, and whether lm-eval was asked to run (tasks, model)."""
    executed = []
    monkeypatch.setattr(HarnessCLI, "execute", lambda self, args: executed.append(args))
    monkeypatch.setattr("dllm.parallel.dist.leave_together", lambda: None)
    monkeypatch.setattr(sys, "argv", ["python -m dllm.eval", *argv])
    try:
        eval_main.main()
        status = None
    except SystemExit as exit_:
        status = exit_.code
    return status, capsys.readouterr().err, bool(executed)


@pytest.mark.parametrize("argv, expected", [
    (["--model_args", "pretrained=dllm-waitingline-llada,gen_lenght=8"], "(did you mean 'gen_length'?)"),
    (["--model_args", "tau=high"], "option 'tau' expects float"),
    (["--model_args", "batch_size=4", "--batch_size", "2"], "batch_size=4 in --model_args but --batch_size 2"),
    (["--model_args", '{"gen_lenght": 8}'], "(did you mean 'gen_length'?)"),
])
def test_bad_model_args_stop_before_lm_eval_runs(monkeypatch, capsys, argv, expected):
    status, err, executed = _main(monkeypatch, capsys, "--model", "dllm", "--tasks", "t", *argv)
    assert (status, executed) == (2, False)
    assert err.startswith("python -m dllm.eval: error: ") and expected in err and err.count("\n") == 1, err


@pytest.mark.parametrize("argv", [
    ["--model", "dllm", "--tasks", "t", "--model_args", "pretrained=dllm-waitingline-llada,gen_length=8,tau=0.5"],
    ["--model", "dllm", "--tasks", "t"],
    ["--model", "hf", "--tasks", "t", "--model_args", "pretrained=gpt2,gen_lenght=8"],  # not dllm's to read
])
def test_good_model_args_and_other_models_run_on(monkeypatch, capsys, argv):
    status, err, executed = _main(monkeypatch, capsys, *argv)
    assert (status, executed) == (None, True), err
