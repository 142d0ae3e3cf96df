"""What chat templates read of tool turns: an assistant turn that only called tools has empty
text, not None (which a Jinja template writes as "None"), and how a tokenizer's template shows
tools is read again when its template changes (the cached answer names the template it read)."""
from __future__ import annotations

from dllm.api.tools import template_format, template_messages

CALL = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}}


def test_a_turn_that_only_called_tools_has_empty_text():
    out = template_messages([{"role": "user", "content": "Hi"},
                             {"role": "assistant", "content": None, "tool_calls": [CALL]}])
    assert out[1]["content"] == ""
    assert out[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert out[0] == {"role": "user", "content": "Hi"}


class Tokenizer:
    """A template that ignores tools, or shows them in Hermes' form once it is set to "hermes"."""

    chat_template = "plain"

    def apply_chat_template(self, messages, tools=None, tokenize=False, add_generation_prompt=True):
        shown = f"<tool_call>{tools}" if tools and self.chat_template == "hermes" else ""
        return f"{self.chat_template}:{messages[-1]['content']}{shown}"


def test_a_changed_template_is_read_again():
    tok = Tokenizer()
    assert template_format(tok) is None
    tok.chat_template = "hermes"
    assert template_format(tok) == "hermes"
    tok.chat_template = "plain"
    assert template_format(tok) is None
