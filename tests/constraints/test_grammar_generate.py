"""generate(..., grammar=) on tiny random models: every finished answer parses under the grammar
(Lark's own Earley parser decides, not the code under test), greedy and sampled; a ragged batch
decodes each row as its single run; a grammar that does not parse, or that has no sentence within
max_tokens, is refused before any forward."""
from __future__ import annotations

import pytest

from dllm import GenerationConfig
from dllm.engine.decoding import Decoding, RowStart, decode

lark = pytest.importorskip("lark")

PROMPTS = ["hello there", "a much longer prompt that goes on", "x"]
# nested lists of one-letter names: recursive, so no regular expression says it
NESTED = r"""
start: list
list: "[" [item ("," item)*] "]"
item: list | NAME
NAME: /[a-z]/
"""


def _parses(grammar: str, text: str) -> bool:
    try:
        lark.Lark(grammar, parser="earley", lexer="dynamic_complete").parse(text)
    except lark.exceptions.LarkError:
        return False
    return True


@pytest.mark.parametrize("options", [dict(), dict(temperature=1.0, seed=3, block_length=6)])
def test_every_answer_parses_under_the_grammar(tiny_models, options):
    lm = tiny_models["llada"]
    free = lm.generate(PROMPTS, max_tokens=12, chat=False, **options)
    assert not any(_parses(NESTED, t) for t in free.texts)  # a random model does not write these alone
    out = lm.generate(PROMPTS, max_tokens=12, chat=False, grammar=NESTED, **options)
    for text in out.texts:
        assert _parses(NESTED, text), text
    assert any("[[" in t for t in out.texts)  # the recursion is used, not only its regular part


def test_ragged_rows_decode_as_alone(tiny_models):
    lm = tiny_models["dream"]
    options = dict(max_tokens=10, chat=False, temperature=0.8, seeds=[1, 2, 3])
    together = lm.generate(PROMPTS, grammar=NESTED, **options)
    for i, prompt in enumerate(PROMPTS):
        alone = lm.generate([prompt], grammar=NESTED, max_tokens=10, chat=False, temperature=0.8, seeds=[i + 1])
        assert alone.token_ids[0] == together.token_ids[i]


def test_a_row_resumed_at_a_block_boundary_keeps_its_grammar(tiny_models):
    from dllm.api.structured import parse_constraint, row_constraint
    from dllm.api.stops import StopConditions

    lm = tiny_models["llada"]
    config = GenerationConfig(gen_length=12, block_length=6)
    prompt = lm.encode("hello", chat=False)
    constraint = row_constraint(lm, parse_constraint(None, None, None, NESTED), StopConditions.parse(None, None),
                                12, config)
    whole = decode(lm.model, [prompt], config, constraints=[constraint]).answer[0].tolist()
    resumed = Decoding(lm.model, [RowStart(prefix=prompt + whole[:6], gen_length=6, answer_offset=6,
                                           constraint=constraint)], config).run()
    assert resumed.answer[0].tolist() == whole[6:]  # the first block read as the prefix of every canvas check
    assert _parses(NESTED, lm.tokenizer.decode([t for t in whole if t not in lm.model.eos_token_ids]))


@pytest.mark.parametrize("grammar, max_tokens, message", [
    ("start: (", 6, "does not parse as Lark EBNF"),
    ('start: A\nA: /(?<=x)y/', 6, "lookarounds"),
    ('start: "[" "a"~20 "]"', 6, "more than the 6"),  # regular: the token DFA's shortest word
    ('start: "(" start ")" | "a"~20', 6, "fits in 6 answer tokens"),  # recursive: the parse's
    ('start: "(" start ")" | "a"', 65, "at most 64 tokens, not 65"),  # the parse's cost
])
def test_a_bad_grammar_is_refused_before_any_forward(tiny_models, monkeypatch, grammar, max_tokens, message):
    lm = tiny_models["llada"]
    monkeypatch.setattr(lm.model, "forward", lambda *a, **k: pytest.fail("a forward ran"))
    with pytest.raises(ValueError, match=message):
        lm.generate(PROMPTS[:1], max_tokens=max_tokens, chat=False, grammar=grammar)
    with pytest.raises(ValueError, match="not regex and grammar"):
        lm.generate(PROMPTS[:1], max_tokens=6, chat=False, grammar=NESTED, regex="a")
