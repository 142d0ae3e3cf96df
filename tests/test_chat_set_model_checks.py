"""``dllm chat``'s /set checks a change against the model at once (not at the next turn), says
what sets the answer's length as typed, wraps /show at its width, and keeps a uniform-state model's canvas as
its block over the default one."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

import dllm
from dllm.cli.chat_settings import ChatSettings
from dllm.engine.config import GenerationConfig

BASE = GenerationConfig(gen_length=16, block_length=8)


@pytest.fixture(scope="module")
def llada():
    return dllm.load("dllm-waitingline-llada", device="cpu").model


@pytest.mark.parametrize("text", ["strategy=uniform", "cache=encoder"])
def test_set_refuses_what_the_model_cannot_decode(llada, text):
    settings = ChatSettings(BASE, model=llada)
    with pytest.raises(ValueError, match="decode uniform-state models"):
        settings.updated(text)
    assert settings.options == {}


def test_the_length_setting_is_named_as_typed():
    assert ChatSettings(BASE).length_setting() == "gen-length=16"
    assert ChatSettings(BASE).updated("max-tokens=10").length_setting() == "max-tokens=10"
    assert ChatSettings(BASE).updated("max-tokens=10 gen-length=24").length_setting() == "gen-length=24"


@pytest.mark.parametrize("width", range(20, 121, 7))
def test_show_fills_each_line_up_to_its_width_and_no_further(width):
    lines = ChatSettings(BASE).show(width=width).splitlines()
    for line, after in zip(lines, lines[1:]):
        assert len(line) <= width or "  " not in line  # an item longer than the width stands alone
        assert len(line) + 2 + len(after.split("  ")[0]) > width  # the next item did not fit


def test_a_uniform_state_models_canvas_stays_the_block_over_the_default_one():
    canvas_64 = SimpleNamespace(uniform_state=True, config=SimpleNamespace(canvas_length=64))  # not 32
    settings = ChatSettings(GenerationConfig(gen_length=128, block_length=64), model=canvas_64, default_block=32)
    assert settings.config().block_length == 64
    assert ChatSettings(settings.base, max_tokens=100, model=canvas_64, default_block=32).config().block_length == 64
