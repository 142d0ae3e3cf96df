"""A JSON-lines prompts file whose line holds an empty prompt or an empty chat list is refused
naming that line (blank lines counted), never sent to the model as an empty prompt."""
from __future__ import annotations

import json

import pytest

from dllm.cli.prompts import read_prompts


@pytest.mark.parametrize("row", [{"prompt": ""}, {"prompt": "   "}, {"messages": []},
                                 {"messages": [{"role": "user"}]}, {"prompt": "", "messages": []}])
def test_an_empty_prompt_or_chat_is_refused_naming_its_line(tmp_path, row):
    path = tmp_path / "prompts.jsonl"
    path.write_text(json.dumps({"prompt": "hello"}) + "\n\n" + json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=f'{path} line 3: "prompt" must be non-empty text and "messages" a non-empty list'):
        read_prompts(path)
