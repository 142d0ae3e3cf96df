"""``dllm chat`` decodes blocks of 32 when no --block-length is given, as the server does
(``DEFAULT_BLOCK_LENGTH``; LLaDA's own chat.py uses 32): an answer that ends early stops after its
block instead of decoding one block of the whole answer (128 forwards for every answer). Where 32
does not fit the canvas, the steps or the sub-blocks, one block of the answer, as ``generate``."""
from __future__ import annotations

import pytest

import dllm
from dllm.api.request import DEFAULT_BLOCK_LENGTH
from dllm.cli import main
from dllm.cli.chat_settings import ChatSettings
from dllm.engine.config import GenerationConfig

TURN = "Copy: Ann Lee"


def settings(base: GenerationConfig | None = None, **kw) -> ChatSettings:
    return ChatSettings(base or GenerationConfig(), default_block=DEFAULT_BLOCK_LENGTH, **kw)


def test_the_default_answer_is_decoded_in_blocks_of_32():
    config = settings().config()
    assert (config.gen_length, config.block_length, config.steps) == (128, 32, 128)


def test_max_tokens_rounds_up_to_whole_blocks_of_32():
    assert (settings(max_tokens=50).config().gen_length, settings(max_tokens=50).config().block_length) == (64, 32)
    assert settings().updated("max-tokens=10").config().gen_length == 32


@pytest.mark.parametrize("base, text, block", [
    (GenerationConfig(gen_length=48), None, 48),  # a canvas 32 does not divide: one block of it
    (GenerationConfig(steps=10), None, 128),  # a steps budget the 4 blocks do not share evenly
    (GenerationConfig(sub_block_length=48, gen_length=96), None, 96),  # a sub-block longer than 32
    (GenerationConfig(), "gen-length=48", 48),
    (GenerationConfig(), "block-length=8", 8),  # a block set in the chat is kept
    (GenerationConfig(), "gen-length=64", 32),
])
def test_where_32_does_not_fit_the_answer_is_one_block(base, text, block):
    chosen = settings(base)
    if text is not None:
        chosen = chosen.updated(text)
    assert chosen.config().block_length == block


def test_without_a_default_block_the_answer_is_one_block():
    assert ChatSettings(GenerationConfig()).config().block_length == 128


def test_chat_answers_as_generate_in_blocks_of_32_with_fewer_forwards(monkeypatch, capsys):
    """The command's turn equals generate with block_length=32 and stops after the answer's block:
    the bundled model's short answer takes 32 forwards where one block of 128 takes 128."""
    lm = dllm.load()
    messages = [{"role": "user", "content": TURN}]
    blocks = lm.generate(messages, block_length=32)
    whole = lm.generate(messages)
    assert blocks.stats[0]["nfe"] < whole.stats[0]["nfe"] == 128
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO(TURN + "\n"))
    assert main(["chat", "--no-live"]) == 0
    captured = capsys.readouterr()
    assert captured.out == blocks.texts[0] + "\n"
    assert f"| NFE {blocks.stats[0]['nfe']} |" in captured.err
