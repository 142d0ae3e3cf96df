"""Command lines written for vLLM, transformers or ollama: the flags that mean a dllm one are
taken as it, those that change nothing in dllm are accepted (their help says why), and those
dllm has no counterpart of are refused naming what dllm does instead, never with a "did you
mean" of another meaning; ``dllm serve MODEL`` / ``dllm chat MODEL`` name the model as vLLM's
and ollama's commands do; ``dllm generate -`` reads the prompt from stdin, and ``-p/--prompt``
gives one as llama.cpp's does (``--prompt`` was read as an abbreviation of --prompts-file)."""
from __future__ import annotations

import io
import json
import types

import pytest

from dllm.cli import build_parser, main


def _refused(capsys, argv: list[str]) -> str:
    """The one error line of ``argv`` (status 2, before any model work)."""
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = exit_.code
    assert status == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("argv, expected", [
    (["serve", "--max-model-len", "4096"], "dllm's context is the checkpoint's"),
    (["generate", "hi", "--max-model-len", "4096"], "--max-tokens caps the answer"),
    (["serve", "--block-size", "16"], "no paged KV cache"),
    (["serve", "--generation-config", "vllm"], "only generation_config.json's end-of-text ids"),
    (["serve", "--gpu-memory-utilization", "0.9"], "--memory-budget-mb"),
    (["serve", "--enforce-eager"], "unless --cuda-graphs"),
    (["serve", "--enable-log-requests"], "--uvicorn-log-level info"),
    (["generate", "hi", "--do-sample"], "--temperature is above 0"),
    (["serve", "--max-num-batched-tokens", "2048"], "dllm batches rows, not tokens"),
    (["serve", "--kv-cache-dtype", "fp8"], "the model's dtype (--dtype)"),
    (["serve", "--enable-lora"], "--adapter DIR"),
    (["serve", "--ssl-keyfile", "k.pem"], "TLS reverse proxy"),
    (["serve", "--reasoning-parser", "deepseek_r1"], "reasoning included"),
    (["serve", "--speculative-config", "{}"], "--strategy apd"),
    (["serve", "--config", "c.yaml"], "on the command line only"),
    (["generate", "hi", "--min-tokens", "4"], "no counterpart for"),  # never "did you mean --max-tokens"
    (["serve", "--repetition-penalty", "1.1"], "no counterpart for"),
    (["generate", "hi", "--ignore-eos"], "--no-stop-at-eos decodes the positions after it"),
    (["generate", "hi", "-t", "8"], "llama.cpp's -t (threads)"),  # was read as -tp 8, tensor parallelism
    (["chat", "-c", "4096"], "llama.cpp's -c (context size)"),
])
def test_vllm_flags_without_a_counterpart_say_what_dllm_does(capsys, argv, expected):
    err = _refused(capsys, argv)
    flag = next(a for a in argv if a.startswith("-") and a not in ("-",))
    assert f"unknown option {flag!r}; " in err and expected in err, err
    assert "did you mean" not in err  # --max-model-len is not --max-tokens, --block-size not --block-length


@pytest.mark.parametrize("argv, meant", [
    (["serve", "--quantization", "int8"], "--quantize"),
    (["generate", "hi", "--max-num-seqs", "4"], "--batch-size"),  # generate has no --max-batch
    (["chat", "--n-predict", "4"], "--max-tokens"),
    (["generate", "hi", "--load-in-8bit"], "--quantize"),
    (["generate", "hi", "-m", "dllm-waitingline-bd"], "--model"),  # llama.cpp's
])
def test_other_tools_names_point_to_the_flag_of_the_command(capsys, argv, meant):
    assert f"(did you mean {meant!r}?)" in _refused(capsys, argv)


@pytest.mark.parametrize("argv", [["generate", "hi", "-n", "64"], ["chat", "-n", "64"]])
def test_llama_cpp_n_is_not_offered_as_the_sample_count(capsys, argv):
    """llama.cpp's -n 64 is 64 tokens; dllm's --n 64 would be 64 samples: name both, suggest neither."""
    err = _refused(capsys, argv)
    assert "unknown option '-n'; llama.cpp's -n (tokens to predict) is --max-tokens" in err, err
    assert "did you mean" not in err


def test_a_single_dash_flag_is_no_prefix_of_a_longer_one():
    """-tp is tensor parallelism; -t (llama.cpp's threads) is not its prefix. An attached value
    still reads (-pTEXT is -p TEXT)."""
    parser = build_parser()
    assert parser.parse_args(["generate", "-tp", "2", "hi"]).tensor_parallel == 2
    assert parser.parse_args(["generate", "-pSort: Zed"]).prompt_option == ["Sort: Zed"]
    with pytest.raises(SystemExit):
        parser.parse_args(["generate", "hi", "-t", "2"])


def test_max_logprobs_names_the_bound_the_server_keeps(capsys):
    from dllm.engine.logprobs import MAX_TOP_LOGPROBS

    assert f"up to {MAX_TOP_LOGPROBS} alternatives per token" in _refused(capsys, ["serve", "--max-logprobs", "5"])


def test_a_far_flag_gets_no_suggestion_of_another_meaning(capsys):
    """Flags that share only dashes and a word with a dllm flag: no "did you mean" (at difflib's
    0.6 --task was --threads); a typo still gets one."""
    for flag in ("--task", "--swap-space", "--load-format"):
        err = _refused(capsys, ["serve", flag, "x"])
        assert f"unknown option {flag!r} (see dllm serve --help)" in err, err
    assert "(did you mean '--temperature'?)" in _refused(capsys, ["serve", "--tempreture", "1"])


def test_served_model_name_takes_one_name(capsys):
    assert build_parser().parse_args(["serve", "--served-model-name", "gpt"]).served_model_name == "gpt"
    assert build_parser().parse_args(["serve"]).served_model_name is None
    err = _refused(capsys, ["serve", "--served-model-name", "a", "b"])
    assert "argument --served-model-name: dllm serves one name, got 2 (a b); give one" in err  # b was read as MODEL


def test_vllm_names_of_dllm_flags_are_taken_as_them():
    args = build_parser().parse_args(["serve", "--max-num-seqs", "3", "--tensor-parallel-size", "2", "--dtype", "half",
                                      "--uvicorn-log-level", "info", "--trust-remote-code", "--disable-log-requests",
                                      "--enable-auto-tool-choice", "--disable-log-stats"])
    assert (args.max_batch, args.tensor_parallel, args.dtype, args.uvicorn_log_level) == (3, 2, "float16", "info")
    plain = build_parser().parse_args(["serve"])
    assert (plain.max_batch, plain.tensor_parallel, plain.dtype, plain.uvicorn_log_level) == (8, 1, "auto", "warning")
    args = build_parser().parse_args(["generate", "hi", "-tp", "2", "--dtype", "float", "--trust-remote-code"])
    assert (args.tensor_parallel, args.dtype) == (2, "float32")


def test_a_dtype_that_is_no_alias_is_still_refused(capsys):
    err = _refused(capsys, ["generate", "hi", "--dtype", "double"])
    assert "invalid choice 'double'" in err and "one of: auto, float32, bfloat16, float16" in err


def test_the_no_op_flags_say_so_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for flag in ("--trust-remote-code", "--disable-log-requests", "--enable-auto-tool-choice", "--disable-log-stats"):
        assert "changes nothing" in help_text.split(f"{flag} accepted", 1)[1][:80], flag
    assert "--max-num-seqs N vLLM's name for --max-batch" in help_text


def test_uvicorn_log_level_reaches_uvicorn(monkeypatch):
    from dllm.serve.limits import ServerLimits
    from dllm.serve.serve_options import serve_forever

    seen = {}
    monkeypatch.setattr("uvicorn.Config", lambda app, **kwargs: seen.update(kwargs) or kwargs)
    monkeypatch.setattr("dllm.serve.shutdown.DeadlineServer.__init__", lambda self, *a: None)
    monkeypatch.setattr("dllm.serve.shutdown.DeadlineServer.run", lambda self, sockets: None)
    app = types.SimpleNamespace(state=types.SimpleNamespace(shutdown=None))
    for argv, level in ((["serve"], "warning"), (["serve", "--uvicorn-log-level", "debug"], "debug")):
        serve_forever(app, build_parser().parse_args(argv), ServerLimits(), sock=None)
        assert seen["log_level"] == level


def test_serve_refuses_seed_naming_what_it_does_instead(capsys, monkeypatch):
    monkeypatch.setattr("dllm.load", lambda *a, **k: pytest.fail("loaded before refusing --seed"))
    err = _refused(capsys, ["serve", "--seed", "0", "--port", "0"])
    assert err.startswith("dllm serve: error: --seed 0: ") and "fresh random one" in err and "drop --seed" in err


def test_the_model_may_be_the_positional_argument(capsys, monkeypatch):
    from dllm.cli.options import load_from_args

    asked = []

    def load(path, **kwargs):
        asked.append(path)
        raise ValueError("stop here")

    monkeypatch.setattr("dllm.load", load)
    assert main(["chat", "dllm-waitingline-bd"]) == 2
    assert main(["chat", "--model", "dllm-waitingline-moe"]) == 2
    assert main(["chat", "dllm-waitingline-bd", "--model", "dllm-waitingline-bd"]) == 2
    with pytest.raises(ValueError, match="stop here"):
        load_from_args(build_parser().parse_args(["serve", "dllm-waitingline-d2f", "--port", "0"]))
    assert asked == ["dllm-waitingline-bd", "dllm-waitingline-moe", "dllm-waitingline-bd", "dllm-waitingline-d2f"]
    capsys.readouterr()
    assert main(["chat", "dllm-waitingline-bd", "--model", "dllm-waitingline-moe"]) == 2
    assert len(asked) == 4  # refused before loading
    assert capsys.readouterr().err == ("dllm chat: error: two models given, 'dllm-waitingline-bd' and --model "
                                       "'dllm-waitingline-moe'; give one\n")


def _answers(capsys, argv: list[str]) -> list[str]:
    assert main(argv) == 0
    return [json.loads(line)["text"] for line in capsys.readouterr().out.splitlines()]


def test_a_dash_prompt_reads_stdin_as_one_prompt(tiny_dirs, capsys, monkeypatch):
    common = ["--model", str(tiny_dirs["llada"]), "--gen-length", "8", "--json", "--raw", "-q"]
    expected = _answers(capsys, ["generate", *common, "first", "two lines\nof stdin"])
    monkeypatch.setattr("sys.stdin", io.StringIO("two lines\nof stdin\n"))  # its last newline is no part of it
    assert _answers(capsys, ["generate", *common, "first", "-"]) == expected
    monkeypatch.setattr("sys.stdin", io.StringIO(" \n"))
    assert "reads stdin, which held no text" in _refused(capsys, ["generate", *common, "-"])
    assert "given twice" in _refused(capsys, ["generate", *common, "-", "-"])


def test_p_and_prompt_give_prompts_as_arguments_do(tiny_dirs, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("from stdin"))
    common = ["--model", str(tiny_dirs["llada"]), "--gen-length", "8", "--json", "--raw", "-q"]
    expected = _answers(capsys, ["generate", *common, "hello there", "from stdin"])
    assert _answers(capsys, ["generate", *common, "--prompt", "hello there", "-p", "-"]) == expected
    assert "or with -p/--prompt, not both" in _refused(capsys, ["generate", *common, "-p", "a", "b"])
    assert "or with --prompts-file, not both" in _refused(capsys, ["generate", *common, "-p", "a",
                                                                   "--prompts-file", "x.txt"])


@pytest.mark.parametrize("command, expected", [
    ("run", "(did you mean 'chat'?)"),  # ollama run MODEL
    ("ls", "(did you mean 'models'?)"),
    ("complete", "(did you mean 'generate'?)"),  # vllm complete
    ("help", "; for help, dllm --help or dllm COMMAND --help; commands: generate, chat"),
])
def test_other_tools_commands_point_to_dllms(capsys, command, expected):
    err = _refused(capsys, [command, "x"])
    assert err.startswith(f"dllm: error: unknown command {command!r}") and expected in err, err


def test_cors_flags_of_vllm_are_answered_with_what_the_server_allows(capsys):
    from dllm.serve.cors import CORS_HEADERS, CORS_METHODS

    for flag in ("--allowed-methods", "--allowed-headers"):
        err = _refused(capsys, ["serve", flag, '["*"]'])
        assert all(name in err for name in (*CORS_METHODS, *CORS_HEADERS)) and "did you mean" not in err, err


def test_allowed_origins_takes_vllms_json_list(capsys):
    parse = build_parser().parse_args
    assert parse(["serve", "--allowed-origins", '["*"]']).allowed_origins == ("*",)
    both = '["http://localhost:3000", "https://app.example.com"]'
    assert parse(["serve", "--allowed-origins", both]).allowed_origins == ("http://localhost:3000",
                                                                          "https://app.example.com")
    assert parse(["serve", "--allowed-origins", "http://localhost:3000,https://app.example.com"]).allowed_origins \
        == ("http://localhost:3000", "https://app.example.com")
    assert "is not a JSON list" in _refused(capsys, ["serve", "--allowed-origins", '["*"'])
    assert "not a browser origin" in _refused(capsys, ["serve", "--allowed-origins", '["app.example.com/x"]'])
