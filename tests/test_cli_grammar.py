"""``dllm generate --grammar FILE``: the API's grammar-constrained rows on a random tiny model, and a
grammar file that is missing or does not parse refused in one error line before the model loads."""
from __future__ import annotations

import json

import pytest

import dllm
from dllm.cli import main

GRAMMAR = 'start: "(" [start ("," start)*] ")"\n'


def test_grammar_answers_are_the_apis(tiny_dirs, tmp_path, capsys):
    path = tiny_dirs["llada"]
    grammar_file = tmp_path / "nested.lark"
    grammar_file.write_text(GRAMMAR)
    assert main(["generate", "hi", "there", "--model", str(path), "--dtype", "float32", "--raw", "--json",
                 "--max-tokens", "10", "--grammar", str(grammar_file)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    lm = dllm.load(path, dtype="float32")
    expected = lm.generate(["hi", "there"], chat=False, max_tokens=10, grammar=GRAMMAR)
    assert [r["text"] for r in rows] == expected.texts
    assert all(t.startswith("(") and t.endswith(")") for t in expected.texts)


@pytest.mark.parametrize("content, expected", [(None, "no such file"), ("start: (", "does not parse as Lark EBNF")])
def test_bad_grammar_file_is_one_error_line_before_loading(monkeypatch, capsys, tmp_path, content, expected):
    monkeypatch.setattr("dllm.load", lambda *a, **k: pytest.fail("the model was loaded before the check"))
    path = tmp_path / "g.lark"
    if content is not None:
        path.write_text(content)
    assert main(["generate", "hi", "--grammar", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dllm generate: error: ") and expected in err and len(err.splitlines()) == 1
