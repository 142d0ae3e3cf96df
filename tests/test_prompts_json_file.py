"""A prompts file named ``.json`` is read as JSON lines, as ``.jsonl`` is: its lines' prompts, or
an error naming the line that is not a JSON object (a JSON array of prompts among them), never
its raw JSON text sent to the model as prompts."""
from __future__ import annotations

import json

import pytest

from dllm.cli import main
from dllm.cli.prompts import read_prompts


def test_json_lines_in_a_json_file_are_their_prompts(tmp_path):
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps({"prompt": "hello"}) + "\n" + json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    assert [p.prompt for p in read_prompts(path)] == ["hello", [{"role": "user", "content": "hi"}]]


@pytest.mark.parametrize("text", [json.dumps(["one", "two"]), json.dumps(["one", "two"], indent=2)])
def test_a_json_array_is_refused_naming_the_line_and_the_format(tmp_path, capsys, text):
    path = tmp_path / "prompts.json"
    path.write_text(text + "\n")
    assert main(["generate", "--prompts-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dllm generate: error: {path} line 1 ") and err.count("\n") == 1, err
    assert '"prompt"' in err
