"""Files the CLI reads (prompts, a JSON schema, a grammar) are UTF-8, with or without the
byte-order mark some Windows editors write (it is not part of the first prompt or of the schema);
a prompts file in another encoding is one error line naming the file."""
from __future__ import annotations

import io
import json

import pytest

from dllm.cli import main
from dllm.cli.prompts import read_prompts

BOM = "\ufeff"


@pytest.mark.parametrize("name, content, expected", [
    ("p.txt", "héllo\r\nworld\r\n", ["héllo", "world"]),
    ("p.jsonl", json.dumps({"prompt": "héllo"}, ensure_ascii=False) + "\r\n" + json.dumps({"prompt": "world"}) + "\r\n",
     ["héllo", "world"]),
])
def test_a_byte_order_mark_is_not_part_of_the_first_prompt(tmp_path, monkeypatch, name, content, expected):
    path = tmp_path / name
    path.write_bytes((BOM + content).encode("utf-8"))
    assert [p.prompt for p in read_prompts(path)] == expected
    monkeypatch.setattr("sys.stdin", io.StringIO(BOM + content))
    assert [p.prompt for p in read_prompts("-")] == expected


def test_a_file_that_is_not_utf8_is_one_error_line_naming_it(tmp_path, capsys):
    path = tmp_path / "p.txt"
    path.write_bytes("caf\xe9\n".encode("latin-1"))
    assert main(["generate", "--prompts-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dllm generate: error: prompts file {path} is not UTF-8") and err.count("\n") == 1, err


def test_a_schema_file_with_a_byte_order_mark_constrains_as_without(tmp_path, monkeypatch):
    from dllm.cli import build_parser
    from dllm.cli.structured import constraint_spec

    schema = {"type": "array", "items": {"type": "string"}}
    plain, marked = tmp_path / "plain.json", tmp_path / "marked.json"
    plain.write_text(json.dumps(schema), encoding="utf-8")
    marked.write_bytes((BOM + json.dumps(schema)).encode("utf-8"))
    spec = [constraint_spec(build_parser().parse_args(["generate", "x", "--json-schema", str(p)])) for p in (plain, marked)]
    assert spec[0] == spec[1]
