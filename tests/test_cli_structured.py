"""``dllm generate --regex | --choice | --json-schema FILE``: the API's constrained rows (each
answer a word of the language, checked here with re and jsonschema on a random tiny model), and
bad patterns, files and combinations refused in one error line before the model loads."""
from __future__ import annotations

import json
import re

import pytest

import dllm
from dllm.cli import main
from dllm.samplers.constraints import json_answer_errors

SCHEMA = {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3}


def _rows(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_constrained_answers_are_the_apis(tiny_dirs, tmp_path, capsys):
    path = tiny_dirs["llada"]
    lm = dllm.load(path, dtype="float32")
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA))
    common = ["--model", str(path), "--dtype", "float32", "--raw", "--json", "--max-tokens", "24",
              "--temperature", "0.8", "--seed", "2"]
    for flags, kwargs in [(["--regex", "[a-z]+( [a-z]+)*"], dict(regex="[a-z]+( [a-z]+)*")),
                          (["--choice", "yes", "no"], dict(choice=["yes", "no"])),
                          (["--json-schema", str(schema_file)], dict(json_schema=SCHEMA))]:
        assert main(["generate", "hi", "there", *common, *flags]) == 0
        rows = _rows(capsys)
        expected = lm.generate(["hi", "there"], chat=False, max_tokens=24, temperature=0.8, seed=2, **kwargs)
        assert [r["text"] for r in rows] == expected.texts
    assert all(re.fullmatch("[a-z]+( [a-z]+)*", t) for t in lm.generate(["hi"], chat=False, max_tokens=24,
                                                                         regex="[a-z]+( [a-z]+)*").texts)
    assert all(json_answer_errors(r["text"], SCHEMA) is None for r in rows), rows


def test_a_choice_without_a_length_decodes_its_longest_word_as_the_api(tiny_dirs, capsys):
    """No --max-tokens / --gen-length: the canvas holds the longest choice and its end-of-text
    (api.structured.default_max_tokens), as generate's without a length; --gen-length keeps its own."""
    path = tiny_dirs["llada"]
    lm = dllm.load(path, dtype="float32")
    common = ["--model", str(path), "--dtype", "float32", "--raw", "--json", "--choice", "yes", "no", "maybe not"]
    assert main(["generate", "hi", "there", *common]) == 0
    rows = _rows(capsys)
    expected = lm.generate(["hi", "there"], chat=False, choice=["yes", "no", "maybe not"])
    assert [r["text"] for r in rows] == expected.texts and [r["nfe"] for r in rows] == [s["nfe"] for s in expected.stats]
    assert all(r["nfe"] <= len("maybe not") + 1 for r in rows), rows
    assert main(["generate", "hi", *common, "--gen-length", "32"]) == 0
    assert _rows(capsys)[0]["nfe"] == 32  # one token a step over the canvas that was asked for


@pytest.mark.parametrize("argv, expected", [
    (["--regex", "a("], "cannot be compiled"),
    (["--regex", "a", "--choice", "b"], "give one of regex, choice, json_schema"),
    (["--json-schema", "no-such-schema.json"], "no such file"),
    (["--json-schema", "{tmp}/bounded.json"], "json_schema uses 'minimum' at /"),  # a keyword the regex ignores
])
def test_bad_structured_options_are_one_error_line_before_loading(monkeypatch, capsys, tmp_path, argv, expected):
    monkeypatch.setattr("dllm.load", lambda *a, **k: pytest.fail("the model was loaded before the check"))
    (tmp_path / "bounded.json").write_text(json.dumps({"type": "number", "minimum": 3, "multipleOf": 0.5}))
    assert main(["generate", "hi", *[a.format(tmp=tmp_path) for a in argv]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dllm generate: error: ") and expected in err and len(err.splitlines()) == 1
