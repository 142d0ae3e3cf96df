"""``dllm chat``'s context checks at their edges: an answer canvas that leaves exactly one token for
a message is taken, one more is refused with the longest answer that fits; a conversation that
fills the context exactly is decoded; a system message counts, and one that leaves no room is
named."""
from __future__ import annotations

import pytest

import dllm
from dllm.cli.chat_context import check_answer_room, check_conversation_fits, longest_answer
from dllm.engine.config import GenerationConfig

FIX = "/set max-tokens="


@pytest.fixture(scope="module")
def lm():
    return dllm.load()


def _tokens(lm, messages) -> int:
    return len(lm.encode(messages, chat=True))


def test_the_longest_answer_follows_a_single_block_and_takes_whole_fixed_blocks(lm):
    assert longest_answer(lm, GenerationConfig(gen_length=16), 13) == 13  # one block of the answer's length
    assert longest_answer(lm, GenerationConfig(gen_length=16, block_length=8), 13) == 8
    assert longest_answer(lm, GenerationConfig(gen_length=16, block_length=8), -3) == 0


def test_an_answer_that_leaves_one_token_for_a_message_is_taken(lm):
    context = lm.model.config.max_sequence_length
    template = _tokens(lm, [{"role": "user", "content": ""}])
    check_answer_room(lm, GenerationConfig(gen_length=context - template - 1), "--gen-length", FIX)
    with pytest.raises(ValueError, match=f"; use {FIX}{context - template - 1} or less$"):
        check_answer_room(lm, GenerationConfig(gen_length=context - template), "--gen-length", FIX)


def test_the_system_message_counts_and_one_too_long_is_named(lm):
    context = lm.model.config.max_sequence_length
    template = _tokens(lm, [{"role": "user", "content": ""}])
    config = GenerationConfig(gen_length=context - template - 1)  # fits without a system message
    with pytest.raises(ValueError, match="the chat template and the system message"):
        check_answer_room(lm, config, "--gen-length", FIX, system="Be brief.")
    system = "Be brief. " * (context // 4)
    assert _tokens(lm, [{"role": "system", "content": system}, {"role": "user", "content": ""}]) + 2 > context
    with pytest.raises(ValueError, match="shorten --system"):
        check_answer_room(lm, GenerationConfig(gen_length=8), "--gen-length", FIX, system=system)


def test_a_conversation_that_fills_the_context_exactly_is_decoded(lm):
    context = lm.model.config.max_sequence_length
    history = [{"role": "user", "content": "Copy: Ann Lee"}]
    room = context - _tokens(lm, history)
    check_conversation_fits(lm, history, GenerationConfig(gen_length=room))
    with pytest.raises(ValueError, match=f"shorten the message or {FIX}{room}$"):
        check_conversation_fits(lm, history, GenerationConfig(gen_length=room + 1))
