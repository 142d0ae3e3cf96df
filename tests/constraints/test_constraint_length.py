"""A constrained call that sets no answer length decodes the longest word of its language and its
end-of-text, not the default canvas (a choice between "yes" and "no" is a few positions, not 128
of which all but 3 end up end-of-text), in generate, generate_ids and stream; a length that was
set, and a language of words of any length, keep the canvas they had."""
from __future__ import annotations

import re

import pytest

from dllm import GenerationConfig
from dllm.samplers.constraints import compile_regex, token_bytes

PROMPTS = ["hello there", "x"]
CHOICES = ["yes", "no", "maybe not"]


def _longest(lm, regex: str) -> int | None:
    spelled = tuple(token_bytes(lm.tokenizer, lm.model.config.vocab_size))
    dfa = compile_regex(regex, spelled, lm.model.eos_token_ids[0])
    return dfa.longest_word()


def test_longest_word_of_finite_and_unbounded_languages(tiny_models):
    lm = tiny_models["llada"]
    assert _longest(lm, "yes|no|maybe not") == len("maybe not")  # written one character a token at most
    assert _longest(lm, "[0-9]{1,3}") == 3
    assert _longest(lm, "[a-z]+") is None and _longest(lm, "(ab)*c") is None


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_a_choice_without_a_length_decodes_its_longest_word(tiny_models, family):
    lm = tiny_models[family]
    bound = len("maybe not") + 1  # the longest word and its end-of-text
    out = lm.generate(PROMPTS, chat=False, choice=CHOICES)
    assert all(t in CHOICES for t in out.texts) and out.finish_reasons == ["eos"] * 2
    assert all(s["nfe"] <= bound for s in out.stats), out.stats  # one token a step over `bound` positions
    same = lm.generate(PROMPTS, chat=False, choice=CHOICES, max_tokens=bound)
    assert same.texts == out.texts and same.token_ids == out.token_ids
    ids = [lm.encode(p, chat=False) for p in PROMPTS]
    assert lm.generate_ids(ids, choice=CHOICES).token_ids == out.token_ids
    last = list(lm.stream(PROMPTS[0], chat=False, choice=CHOICES))[-1]
    assert last.final_ids == out.token_ids[0]


def test_a_set_length_or_an_unbounded_language_keeps_its_canvas(tiny_models):
    """One token a step and no early stop at end-of-text (stop_at_eos off): nfe is the canvas."""
    lm = tiny_models["llada"]
    assert lm.generate(PROMPTS[1], chat=False, choice=CHOICES, gen_length=32).stats[0]["nfe"] == 32
    assert lm.generate(PROMPTS[1], GenerationConfig(gen_length=16), chat=False, choice=CHOICES).stats[0]["nfe"] == 16
    free = lm.generate(PROMPTS[1], chat=False, regex="[a-z ]+")
    assert re.fullmatch("[a-z ]+", free.texts[0]) and free.stats[0]["nfe"] == GenerationConfig().gen_length


def test_a_word_longer_than_max_tokens_is_refused_counting_max_tokens_not_the_canvas(tiny_models):
    """max_tokens=13 in blocks of 8 makes a 16-token canvas: a language whose shortest word takes
    14 tokens (the tiny tokenizer writes one character a token at most) fits the canvas, not the
    answer, and is refused before the decode with both counts named."""
    lm = tiny_models["llada"]
    with pytest.raises(ValueError, match=f"takes {len('ab' * 7)} tokens, more than the 13 the answer may have"):
        lm.generate(PROMPTS[1], chat=False, regex="(ab){7}", max_tokens=13, block_length=8)
