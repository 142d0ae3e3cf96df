"""The command line: generate prints text + stats, prompts files, --help shows defaults once,
bad input is one error line with exit status 2 before any model work, quiet pipes and logging."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dllm.cli import build_parser, main


def _dllm(*args, timeout=300):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    return subprocess.run([sys.executable, "-m", "dllm", *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_generate_json(tiny_dirs):
    done = _dllm("generate", "--model", str(tiny_dirs["llada"]), "hello there", "a second prompt",
                 "--gen-length", "16", "--block-length", "8", "--steps", "8", "--json")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(rows) == 2 and all({"text", "nfe", "tpf", "tokens"} <= set(r) for r in rows)
    assert all(r["nfe"] <= 8 for r in rows)


# The tests below run ``main`` in this process: test_generate_json above and the closed pipe's test
# run ``python -m dllm`` itself (whose exit status is main's), and each start-up imports torch anew.

def test_generate_prints_stats_line(tiny_dirs, capsys):
    assert main(["generate", "--model", str(tiny_dirs["dream"]), "hi", "--gen-length", "8", "--policy", "entropy"]) == 0
    err = capsys.readouterr().err
    assert "NFE" in err and "TPF" in err and "tokens/s" in err


def test_help_lists_defaults(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["generate", "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    for option in ("--policy", "--cache", "--gen-length", "--block-length", "--steps", "--temperature", "--strategy"):
        assert option in out
    assert "(default: low_confidence)" in out


def test_bad_option_is_a_clear_error(tiny_dirs, capsys):
    assert main(["generate", "--model", str(tiny_dirs["llada"]), "hi", "--gen-length", "30", "--block-length", "8"]) == 2
    assert "not a multiple of block_length" in capsys.readouterr().err
    assert main(["generate", "--model", "/nonexistent/dir", "hi"]) == 2
    assert "does not exist" in capsys.readouterr().err


# --- prompts files ------------------------------------------------------------------------

from dllm.cli.prompts import read_prompts  # noqa: E402

GEN = ["--gen-length", "8", "--block-length", "8", "--steps", "8"]


def _json_rows(text: str) -> list[dict]:
    return [{k: r[k] for k in ("text", "nfe", "tokens")} for r in map(json.loads, text.splitlines())]


def test_prompts_file_stdin_and_arguments_give_the_same_outputs(tiny_dirs, tmp_path, capsys, monkeypatch):
    import io

    model = ["--model", str(tiny_dirs["llada"]), *GEN, "--json", "--raw"]
    prompts = ["hello there", "a second prompt", "third"]
    assert main(["generate", *model, "--batch-size", "2", *prompts]) == 0
    expected = _json_rows(capsys.readouterr().out)
    text_file = tmp_path / "p.txt"
    text_file.write_text("hello there\n\na second prompt\nthird\n")  # blank lines are skipped
    jsonl_file = tmp_path / "p.jsonl"
    jsonl_file.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    for source in (text_file, jsonl_file):
        assert main(["generate", *model, "--prompts-file", str(source)]) == 0
        assert _json_rows(capsys.readouterr().out) == expected
    monkeypatch.setattr("sys.stdin", io.StringIO(jsonl_file.read_text()))
    assert main(["generate", *model, "--prompts-file", "-"]) == 0
    assert _json_rows(capsys.readouterr().out) == expected


def test_prompts_file_reader_keeps_file_lines_and_messages(tmp_path):
    f = tmp_path / "p.jsonl"
    messages = [{"role": "user", "content": "hi"}]
    f.write_text(json.dumps({"prompt": "a"}) + "\n\n" + json.dumps({"messages": messages}) + "\n")
    rows = read_prompts(f)
    assert [(r.line, r.prompt) for r in rows] == [(1, "a"), (3, messages)]


@pytest.mark.parametrize("content, expected", [
    ("", "holds no prompt"),
    ("\n  \n", "holds no prompt"),
    ('{"prompt": "a"}\n\n{"text": "b"}\n', 'line 3 has no "prompt" or "messages"'),
    ('{"prompt": "a"}\nnot json\n', "line 2 is not valid JSON"),
    ('["a"]\n', "line 1 is a JSON list"),
    ('{"prompt": ""}\n', 'line 1: "prompt" must be non-empty text'),
    ('{"messages": [{"role": "user"}]}\n', 'line 1: "prompt" must be non-empty text and "messages"'),
])
def test_bad_prompts_file_is_one_error_line_before_loading(tmp_path, capsys, content, expected):
    f = tmp_path / ("p.jsonl" if content.strip() else "p.txt")
    f.write_text(content)
    assert main(["generate", "--model", str(tmp_path / "no-model"), "--prompts-file", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dllm generate: error: ") and err.count("\n") == 1 and expected in err


def test_generate_needs_prompts_from_one_place(tmp_path, capsys):
    f = tmp_path / "p.txt"
    f.write_text("a\n")
    assert main(["generate", "--prompts-file", str(f), "b"]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["generate"]) == 2
    assert "--prompts-file" in capsys.readouterr().err
    assert main(["generate", "--prompts-file", str(tmp_path / "missing.txt")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_too_long_prompt_names_its_file_line_before_decoding(tiny_dirs, tmp_path, capsys):
    f = tmp_path / "p.txt"
    f.write_text("short\n\nfine too\n" + "abcdefghij " * 300 + "\n")
    assert main(["generate", "--model", str(tiny_dirs["llada"]), *GEN, "--prompts-file", str(f)]) == 2
    captured = capsys.readouterr()
    assert f"{f} line 4: the prompt has" in captured.err and captured.out == ""  # nothing decoded


# --- option errors ------------------------------------------------------------------------

def test_non_positive_sizes_are_usage_errors(capsys):
    for argv in (["generate", "--batch-size", "0", "hi"], ["bench", "throughput", "--prompts", "p", "--out", "o",
                                                            "--batch-size", "0"],
                 ["train-filter", "--out", "o", "--samples", "-1"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        assert "must be a positive integer" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["generate", "hi"], ["bench", "throughput", "--prompts", "PROMPTS", "--out", "OUT"]])
@pytest.mark.parametrize("option, expected", [
    (["--policy", "threshold", "--policy-arg", "tau=high"], "--policy-arg"),
    (["--policy-arg", "nonsense=1"], "nonsense"),
    (["--strategy", "lopa", "--strategy-arg", "branches"], "expected key=value"),
])
def test_bad_policy_option_is_one_error_line_before_loading(tmp_path, capsys, command, option, expected):
    prompts = tmp_path / "p.txt"
    prompts.write_text("hi\n")
    argv = [str(prompts) if a == "PROMPTS" else str(tmp_path / "out") if a == "OUT" else a for a in command]
    assert main([*argv, "--model", str(tmp_path / "no-model"), *option]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dllm {' '.join(command[:-1] if command[0] == 'generate' else command[:2])}: error: ")
    assert err.count("\n") == 1 and expected in err


def test_bad_out_is_refused_before_any_work(tmp_path, capsys):
    a_file = tmp_path / "results.json"
    a_file.write_text("{}")
    prompts = tmp_path / "p.txt"
    prompts.write_text("hi\n")
    no_model = str(tmp_path / "no-model")
    for out, expected in ((a_file, "is a file"), (a_file / "sub", "cannot be created")):
        for argv in (["bench", "throughput", "--prompts", str(prompts)], ["train-filter", "--samples", "1"]):
            assert main([*argv, "--model", no_model, "--out", str(out)]) == 2
            err = capsys.readouterr().err
            command = " ".join(a for a in argv[:2] if not a.startswith("-"))
            assert err.startswith(f"dllm {command}: error: --out {out} {expected}")
            assert err.count("\n") == 1


# --- output: pipes, logging, progress -----------------------------------------------------

def test_closed_stdout_pipe_exits_quietly(tiny_dirs, tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("".join(f"prompt {i}\n" for i in range(6)))
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, "-m", "dllm", "generate", "--model", str(tiny_dirs["llada"]), *GEN,
                             "--prompts-file", str(prompts), "--batch-size", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    proc.stdout.close()  # like `dllm generate ... | head -0`
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_quiet_hides_diagnostics_and_verbosity_works_on_every_command(tiny_dirs, capsys):
    model = ["--model", str(tiny_dirs["llada"]), *GEN, "hi"]
    for argv in (["-q", "generate", *model], ["generate", "-q", *model]):
        assert main(argv) == 0
        captured = capsys.readouterr()
        assert captured.out and captured.err == ""
    parser = build_parser()
    for argv in (["-v", "bench", "parallelbench", "--out", "o"], ["bench", "parallelbench", "-q", "--out", "o"],
                 ["train-filter", "--out", "o", "-q"], ["bench", "throughput", "-v", "--prompts", "p", "--out", "o"]):
        args = parser.parse_args(argv)
        assert (args.verbose, args.quiet) in ((1, False), (0, True))


def test_progress_bar_only_on_a_terminal_without_quiet(monkeypatch):
    from dllm.cli.output import progress_bar

    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    assert not progress_bar(3, desc="x", quiet=False).disable
    assert progress_bar(3, desc="x", quiet=True).disable
    assert progress_bar(3, desc="x", quiet=False, enabled=False).disable
    monkeypatch.setattr("sys.stderr.isatty", lambda: False, raising=False)
    assert progress_bar(3, desc="x", quiet=False).disable


# --- help and version ---------------------------------------------------------------------

def _help_of(command: list[str]) -> str:
    parser = build_parser()
    for name in command:
        sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        parser = sub.choices[name]
    return parser.format_help()


def test_help_shows_each_default_once_on_every_command():
    import re

    for command in (["generate"], ["bench", "throughput"], ["bench", "parallelbench"], ["train-filter"]):
        text = " ".join(_help_of(command).split())  # unwrap lines
        assert "(default: None)" not in text, command
        for option_help in re.split(r"\s(?=--?[a-z])", text):
            assert option_help.count("default") <= 1, (command, option_help)
    assert "(default: low_confidence)" in _help_of(["generate"])


def test_policy_and_cache_names_come_from_the_registries(capsys):
    from dllm.cache import CACHES
    from dllm.samplers import RULES, STOPPERS, STRATEGIES

    text = " ".join(_help_of(["bench", "throughput"]).split())
    for names in (RULES, STRATEGIES, STOPPERS, CACHES):
        for name in names:
            assert name in text
    with pytest.raises(SystemExit) as exit_:
        main(["generate", "--policy", "no_such_rule", "hi"])
    assert exit_.value.code == 2 and "invalid choice 'no_such_rule'" in capsys.readouterr().err


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("dllm ")


def test_train_filter_defaults_to_the_bundled_model():
    args = build_parser().parse_args(["train-filter", "--out", "o"])
    assert args.model is None and "bundled model" in _help_of(["train-filter"])


# --- bench throughput, single process -----------------------------------------------------

def test_throughput_streams_rows_with_file_lines_as_batches_finish(tiny_dirs, tmp_path, capsys):
    prompts = tmp_path / "p.txt"
    prompts.write_text("one\n\ntwo\nthree\n")
    out = tmp_path / "tp"
    assert main(["bench", "throughput", "--model", str(tiny_dirs["llada"]), *GEN, "--prompts", str(prompts),
                 "--batch-size", "2", "--out", str(out)]) == 0
    streamed = [json.loads(line) for line in (out / "outputs.rank0.jsonl").read_text().splitlines()]
    summary = json.loads((out / "throughput.json").read_text())
    assert [r["line"] for r in streamed] == [1, 3, 4]
    assert [r["token_ids"] for r in streamed] == [o["token_ids"] for o in summary["outputs"]]
    assert "data_parallel x1" in capsys.readouterr().out


def test_throughput_keeps_finished_batches_when_a_later_one_fails(tmp_path):
    from types import SimpleNamespace

    from dllm.bench.throughput import _decode_share
    from dllm.cli.output import progress_bar

    class FailsOnSecondBatch:
        calls = 0

        def generate_ids(self, ids, config):
            self.calls += 1
            if self.calls == 2:
                raise RuntimeError("out of memory")
            return SimpleNamespace(texts=["t"] * len(ids), token_ids=[[7]] * len(ids),
                                   stats=[{"tokens": 1, "nfe": 1}] * len(ids))

    stream = tmp_path / "outputs.rank0.jsonl"
    prompts = read_prompts_from_text(tmp_path, "a\nb\nc\n")
    with pytest.raises(RuntimeError):
        _decode_share(FailsOnSecondBatch(), [[1], [2], [3]], prompts, [0, 1, 2], None, 2, stream,
                      progress_bar(3, desc="x", quiet=True))
    assert [json.loads(line)["index"] for line in stream.read_text().splitlines()] == [0, 1]


def read_prompts_from_text(tmp_path, text: str):
    f = tmp_path / "prompts.txt"
    f.write_text(text)
    return read_prompts(f)
