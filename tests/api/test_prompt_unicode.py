"""A prompt holding a lone surrogate (what Python makes of bytes that are not UTF-8 read with
``surrogateescape``: stdin or argv under the C locale, ``open(..., errors="surrogateescape")``) is
a ValueError naming the prompt and the character, from ``generate`` and ``encode`` alike, instead
of the tokenizer's TypeError about ``TextEncodeInput``; valid text of any script passes unchanged."""
from __future__ import annotations

import pytest

import dllm
from dllm.api.inputs import prompt_batch

DAMAGED = b"caf\xe9 au lait".decode("utf-8", "surrogateescape")  # "caf" + U+DCE9 + " au lait"


@pytest.fixture(scope="module")
def model():
    return dllm.load(device="cpu")


def test_valid_text_of_any_script_passes_unchanged():
    prompts = ["héllo", "日本語 ☃", [{"role": "user", "content": "naïve 🙂"}]]
    assert prompt_batch(prompts) == prompts


@pytest.mark.parametrize("prompts, where", [
    (DAMAGED, "prompt 0 holds U+DCE9 at character 3"),
    (["fine", DAMAGED], "prompt 1 holds U+DCE9 at character 3"),
    ([[{"role": "user", "content": "fine"}], [{"role": "user", "content": DAMAGED}]],
     "prompt 1, message 0: 'content' holds U+DCE9 at character 3"),
])
def test_a_lone_surrogate_is_named_with_its_prompt_and_place(prompts, where):
    with pytest.raises(ValueError, match="not UTF-8") as err:
        prompt_batch(prompts)
    assert str(err.value).startswith(where), err.value


def test_generate_and_encode_refuse_it_before_the_tokenizer(model):
    with pytest.raises(ValueError, match=r"prompt 1 holds U\+DCE9 at character 3"):
        model.generate(["fine", DAMAGED], max_tokens=4)
    with pytest.raises(ValueError, match=r"the prompt holds U\+DCE9"):
        model.encode(DAMAGED)
    with pytest.raises(ValueError, match=r"message 0: 'content' holds U\+DCE9"):
        model.encode([{"role": "user", "content": DAMAGED}])
    assert model.encode("café", chat=False) == model.tokenizer("café", add_special_tokens=False)["input_ids"]
