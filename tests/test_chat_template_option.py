"""A chat template given at load (``chat_template=``, ``--chat-template``) replaces the checkpoint's:
from a file or as text, checked by rendering before any weight is read, and it is what tools
and every command then use."""
from __future__ import annotations

import pytest

import dllm
from dllm.api.tools import template_format
from dllm.cli.main import build_parser
from dllm.cli.options import load_from_args

TEMPLATE = ("{% if tools %}[tools]{% for t in tools %}{{ t.function.name }};{% endfor %} reply with "
            "<tool_call>...</tool_call>[/tools]{% endif %}{% for m in messages %}<{{ m.role }}>{{ m.content }}"
            "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}


def test_a_template_from_text_or_file_replaces_the_checkpoints(tiny_dirs, tmp_path):
    plain = dllm.load(tiny_dirs["llada"], dtype="float32")
    assert template_format(plain.tokenizer) is None  # the tiny template ignores tools
    (tmp_path / "tools.jinja").write_text(TEMPLATE)
    for given in (TEMPLATE, tmp_path / "tools.jinja", str(tmp_path / "tools.jinja")):
        lm = dllm.load(tiny_dirs["llada"], dtype="float32", chat_template=given)
        assert lm.tokenizer.chat_template == TEMPLATE
        text = lm.tokenizer.decode(lm.encode([{"role": "user", "content": "hi"}], tools=[TOOL]))
        assert text == "[tools]lookup; reply with <tool_call>...</tool_call>[/tools]<user>hi<assistant>"
        assert template_format(lm.tokenizer) == "hermes"  # so tool_choice "auto" is served


@pytest.mark.parametrize("given, words", [
    ("no-such-template.jinja", "neither a file nor a Jinja template"),
    ("{% for m in messages %}{{ m.content }", "cannot render a conversation"),
    ("{{ messages[0].content | no_such_filter }}", "cannot render a conversation"),
    (3, "chat_template must be"),
])
def test_a_bad_template_is_refused_before_any_weight_is_read(tiny_dirs, monkeypatch, given, words):
    monkeypatch.setattr("dllm.api.model.load_model", lambda *a, **k: pytest.fail("weights were read"))
    with pytest.raises((ValueError, TypeError), match=words):
        dllm.load(tiny_dirs["llada"], dtype="float32", chat_template=given)


@pytest.mark.parametrize("command", ["generate", "chat", "serve"])
def test_every_command_takes_chat_template(tiny_dirs, tmp_path, command):
    (tmp_path / "t.jinja").write_text(TEMPLATE)
    args = build_parser().parse_args([command, "--model", str(tiny_dirs["llada"]), "--chat-template",
                                      str(tmp_path / "t.jinja"), *(["hi"] if command == "generate" else [])])
    assert load_from_args(args).tokenizer.chat_template == TEMPLATE
