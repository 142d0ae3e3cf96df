"""``dllm generate`` request options (--stop, --stop-token-id, --max-tokens, --n, --echo): the
same rows as the Python API, finish_reason in the JSON lines, conflicts refused before loading."""
from __future__ import annotations

import json

import pytest

import dllm
from dllm.cli import main

PROMPTS = ["Copy: Ann Lee, Bo Kim", "Reverse: Cy Dunn, Di Ely, Ed Fox"]


@pytest.fixture(scope="module")
def lm():
    return dllm.load()


def test_request_options_give_the_api_rows_with_finish_reasons(lm, capsys):
    opts = dict(max_tokens=12, block_length=4, temperature=1.0, seed=3)
    stop = lm.generate(PROMPTS[0], **opts).texts[0][2:4]
    expected = lm.generate(PROMPTS, stop=[stop], stop_token_ids=[0], n=2, echo=True, **opts)
    argv = ["generate", *PROMPTS, "--json", "--max-tokens", "12", "--block-length", "4", "--temperature", "1",
            "--seed", "3", "--stop", stop, "--stop-token-id", "0", "--n", "2", "--echo-template", "--batch-size", "1"]
    assert main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in rows] == expected.texts
    assert [r["finish_reason"] for r in rows] == expected.finish_reasons
    assert [r["tokens"] for r in rows] == [len(ids) for ids in expected.token_ids]
    assert [r["sample"] for r in rows] == [0, 1, 0, 1]


def test_echo_gives_the_prompt_as_written(lm, capsys):
    answers = lm.generate(PROMPTS, max_tokens=8).texts
    assert main(["generate", *PROMPTS, "--json", "--max-tokens", "8", "--echo"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in rows] == [f"{p}\n{a}" for p, a in zip(PROMPTS, answers)]
    assert all("<|" not in r["text"].split("\n")[0] for r in rows)  # no template tokens


@pytest.mark.parametrize("typed, meant", [("\\n", "\n"), ("a\\tb", "a\tb"), ("\\r\\n", "\r\n"),
                                           ("\\\\n", "\\n"), ("\\d", "\\d"), ("\n", "\n"), ("é\\n", "é\n")])
def test_stop_reads_the_escapes_people_type(typed, meant):
    from dllm.cli import build_parser
    from dllm.cli.options import output_request

    request = output_request(build_parser().parse_args(["generate", "hi", "--stop", typed, "--stop", "x"]))
    assert request.stops.strings == (meant, "x")


def test_max_tokens_sizes_the_canvas_with_the_given_block_length():
    from dllm.cli import build_parser
    from dllm.cli.options import generation_config

    for argv, expected in ((["--max-tokens", "12"], (12, 12, 12)),
                           (["--max-tokens", "12", "--block-length", "8"], (16, 8, 16)),
                           (["--max-tokens", "12", "--block-length", "12", "--steps", "6"], (12, 12, 6))):
        config = generation_config(build_parser().parse_args(["generate", "hi", *argv]))
        assert (config.gen_length, config.block_length, config.steps) == expected


def test_finish_reason_in_every_json_line_and_in_the_stats_line(capsys):
    assert main(["generate", PROMPTS[0], "--json", "--max-tokens", "2"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 1 and rows[0]["finish_reason"] in ("eos", "length") and "sample" not in rows[0]
    assert main(["generate", PROMPTS[0], "--max-tokens", "2"]) == 0
    err = capsys.readouterr().err
    assert any(f"[{reason} | NFE" in err for reason in ("eos", "length")), err


@pytest.mark.parametrize("argv, expected", [
    (["--max-tokens", "8", "--gen-length", "16"], "pass --max-tokens 8 or --gen-length 16, not both"),
    (["--max-tokens", "8", "--gen-length", "128"], "pass --max-tokens 8 or --gen-length 128, not both"),
    (["--max-tokens", "12", "--block-length", "8", "--steps", "3"], "steps=3 must be a positive multiple"),
    (["--stop", ""], "stop strings must be non-empty"),
])
def test_bad_request_options_are_one_error_line_before_loading(monkeypatch, capsys, argv, expected):
    monkeypatch.setattr("dllm.load", lambda *a, **k: pytest.fail("the model was loaded before the check"))
    assert main(["generate", "hi", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dllm generate: error: ") and expected in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("argv", [["--n", "0"], ["--max-tokens", "-1"], ["--stop-token-id", "x"]])
def test_malformed_request_values_are_usage_errors(capsys, argv):
    with pytest.raises(SystemExit) as exit_:
        main(["generate", "hi", *argv])
    assert exit_.value.code == 2 and "error" in capsys.readouterr().err


def test_stop_token_outside_the_vocabulary_is_refused_before_decoding(monkeypatch, capsys):
    monkeypatch.setattr("dllm.api.model.decode", lambda *a, **k: pytest.fail("decoded before the check"))
    assert main(["generate", "hi", "--stop-token-id", "1000000"]) == 2
    assert "outside the model's vocabulary" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["generate", "hi"], ["chat"], ["serve"],
                                     ["bench", "throughput", "--prompts-file", "p", "--out", "o"]])
def test_every_command_that_decodes_takes_max_tokens(command):
    from dllm.cli import build_parser
    from dllm.cli.options import generation_config

    args = build_parser().parse_args([*command, "--max-tokens", "20", "--block-length", "8"])
    assert args.max_tokens == 20 and generation_config(args).gen_length == 24  # 3 blocks of 8 hold 20


def test_serve_takes_max_tokens_as_its_default_answer_length():
    from dllm.cli import build_parser
    from dllm.serve.cli import server_defaults

    parse = build_parser().parse_args
    assert server_defaults(parse(["serve", "--max-tokens", "20"])).max_tokens == 20
    assert server_defaults(parse(["serve", "--gen-length", "64"])).max_tokens == 64
    assert server_defaults(parse(["serve"])).max_tokens == 128  # the --gen-length default
    with pytest.raises(ValueError, match="not both"):
        server_defaults(parse(["serve", "--gen-length", "64", "--max-tokens", "20"]))


@pytest.mark.parametrize("flags, kwargs", [([], {}), (["--choice", "yes", "no"], dict(choice=["yes", "no"]))])
def test_a_block_longer_than_max_tokens_is_the_canvas_the_api_decodes(lm, capsys, flags, kwargs):
    """--block-length 32 with an answer of 6 tokens (--max-tokens, or a choice's longest word and its
    end-of-text) decodes one 32-position block, as generate(block_length=32) does: the CLI's config
    held gen_length == block_length, which merge_config reads as a derived block and dropped; and a
    row whose text is decided stops, as generate's rows do, so the nfe are generate's too."""
    length = [] if kwargs else ["--max-tokens", "6"]
    expected = lm.generate(PROMPTS, block_length=32, **({} if kwargs else dict(max_tokens=6)), **kwargs)
    assert main(["generate", *PROMPTS, "--json", "--block-length", "32", *length, *flags]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in rows] == expected.texts
    assert [r["nfe"] for r in rows] == [s["nfe"] for s in expected.stats]
