"""``--echo`` prints a prompt as written (a chat answer starts on the next line, a raw continuation
right after it); ``--system`` goes before each prompt, and a chat list with a system message of its
own is refused (two would be sent)."""
from __future__ import annotations

import pytest

from dllm.cli.prompts import PromptLine, echo_text, with_system

CHAT = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"}]


def test_echo_ends_a_chat_prompts_line_and_not_a_raw_ones():
    assert echo_text("Once", raw=True) == "Once"
    assert echo_text("Once", raw=False) == "Once\n"
    assert echo_text(CHAT, raw=False) == "hi\nyes\n"


def test_system_goes_before_each_prompt():
    lines = with_system([PromptLine("f", 1, "hi"), PromptLine("f", 2, CHAT)], "Be brief.")
    lead = {"role": "system", "content": "Be brief."}
    assert [p.prompt for p in lines] == [[lead, {"role": "user", "content": "hi"}], [lead, *CHAT]]
    assert with_system(lines, None) is lines


def test_a_chat_list_with_its_own_system_message_is_refused_under_system():
    own = [{"role": "system", "content": "Be long."}, *CHAT]
    with pytest.raises(ValueError, match="f line 4 opens with a system message of its own"):
        with_system([PromptLine("f", 4, own)], "Be brief.")
