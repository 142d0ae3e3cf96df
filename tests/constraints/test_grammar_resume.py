"""The grammar check's shortcuts against its slow path: a parse resumed from an earlier canvas's
chart (the last step's, a commit filter's trial) decides completability and the allowed tokens
(asked of every hole, or of the later ones only) exactly as a fresh parse of the canvas does (itself checked against brute force in
test_grammar_canvas.py), along chains of random edits (holes filled, tokens masked again, a
canvas cut shorter, end-of-text moved); and a ragged batch of rows under two different grammars
decodes each row as its run alone."""
from __future__ import annotations

import random

import numpy as np
import pytest

from dllm.samplers.constraints.canvas import EOS as EOS_KIND
from dllm.samplers.constraints.canvas import HOLE
from dllm.samplers.constraints.cfg_canvas import allowed_tokens, parse_canvas
from dllm.samplers.constraints.grammar import parse_grammar
from dllm.samplers.constraints.lexer import build_lexer

lark = pytest.importorskip("lark")

from test_grammar_canvas import CASES, EOS, MASK  # noqa: E402  the brute-force-checked cases


def _kinds(canvas: list[int]) -> np.ndarray:
    return np.array([HOLE if t == MASK else EOS_KIND if t == EOS else t for t in canvas], dtype=np.int64)


@pytest.mark.parametrize("case", list(CASES))
def test_a_resumed_parse_decides_as_a_fresh_one(case):
    text, vocab, values = CASES[case]
    grammar = parse_grammar(text)
    lexer = build_lexer(grammar, vocab, EOS)
    rng = random.Random(7)
    resumed_somewhere = 0
    for chain in range(12):
        length = rng.randint(3, 7)
        limit = rng.choice([length, length - 1])
        canvas = [MASK] * length
        held = None
        for _ in range(8):
            for _ in range(rng.randint(1, 2)):  # an edit anywhere: fill, mask again, end-of-text
                canvas[rng.randrange(len(canvas))] = rng.choice(values)
            if rng.random() < 0.15 and len(canvas) > 2:  # a cut (EoTP asks of a shorter canvas)
                canvas = canvas[:-1]
                limit = min(limit, len(canvas))
            kinds = _kinds(canvas)
            holes = np.flatnonzero(kinds == HOLE)
            fresh = allowed_tokens(grammar, lexer, kinds, kinds, limit, holes, len(vocab))
            parsed = parse_canvas(grammar, lexer, kinds, kinds, limit, held=held)
            resumed_somewhere += held is not None and held.limit == limit
            assert parsed.completable == parse_canvas(grammar, lexer, kinds, kinds, limit).completable
            got = parsed.allowed(holes, len(vocab))
            assert (got[0] == fresh[0]).all() and (got[1] == fresh[1]).all(), (canvas, limit)
            later = rng.randint(0, len(holes))  # asked of the later holes only (the walk stops before them)
            got = parsed.allowed(holes[later:], len(vocab))
            assert (got[0] == fresh[0][later:]).all() and (got[1] == fresh[1][later:]).all(), (canvas, later)
            assert held is None or held.parse is None or held.limit != limit  # the chart was taken over
            held = parsed
    assert resumed_somewhere > 50


def test_a_taken_over_chart_is_refused_rather_than_read():
    text, vocab, _ = CASES["jsonish"]
    grammar = parse_grammar(text)
    lexer = build_lexer(grammar, vocab, EOS)
    first = parse_canvas(grammar, lexer, _kinds([MASK] * 4), _kinds([MASK] * 4), 4)
    parse_canvas(grammar, lexer, _kinds([2, MASK, MASK, MASK]), _kinds([2, MASK, MASK, MASK]), 4, held=first)
    assert first.completable  # kept
    with pytest.raises(RuntimeError, match="parse the canvas again"):
        first.allowed(np.array([0]), len(vocab))


PARENS = r"""
start: "(" start ")" | NAME
NAME: /[a-z]+/
"""


def test_a_ragged_batch_of_two_grammars_decodes_each_row_as_alone(tiny_models):
    from dllm import GenerationConfig
    from dllm.api.stops import StopConditions
    from dllm.api.structured import parse_constraint, row_constraint
    from dllm.engine.decoding import decode

    from test_grammar_generate import NESTED, _parses

    lm = tiny_models["llada"]
    config = GenerationConfig(gen_length=10, block_length=5)
    prompts = [lm.encode("hello there, a longer prompt", chat=False), lm.encode("x", chat=False)]
    grammars = [NESTED, PARENS]
    constraints = [row_constraint(lm, parse_constraint(None, None, None, g), StopConditions.parse(None, None), 10, config)
                   for g in grammars]
    together = decode(lm.model, prompts, config, constraints=constraints).answer
    for i, (prompt, grammar) in enumerate(zip(prompts, grammars)):
        alone = decode(lm.model, [prompt], config, constraints=[constraints[i]]).answer[0].tolist()
        assert together[i].tolist() == alone
        text = lm.tokenizer.decode([t for t in alone if t not in lm.model.eos_token_ids])
        assert _parses(grammar, text), text


def test_a_grammar_rows_mask_is_its_allowed_ids_and_a_shard_its_columns():
    """A grammar row's mask (its allowed ids copied as one slice, not gathered per column) keeps
    exactly the ids the parse allows and end-of-text where it may come, nothing past the
    tokenizer; a tensor-parallel shard masks its columns of it; rows in a batch as alone."""
    import torch

    from dllm.samplers.constraints import CanvasConstraints, RowConstraint, compile_grammar

    from test_canvas_check import EOS as C_EOS, MASK as C_MASK, SPELLED, _state

    grammar = compile_grammar('start: "a" start "b" | "c"', SPELLED, C_EOS)  # a^n c b^n: recursive
    canvas = [[7, C_MASK, C_MASK, C_MASK, C_MASK], [7, 2, C_MASK, C_MASK, C_EOS]]
    rows = [RowConstraint(dfa=grammar), RowConstraint(dfa=grammar)]
    logits = torch.randn(2, 4, 9, generator=torch.Generator().manual_seed(2))  # 9: one id past the tokenizer
    whole = CanvasConstraints(rows, C_MASK, [C_EOS]).mask_logits(_state(canvas, 1, 5), logits)
    for n, row in enumerate(canvas):
        kinds = np.array([HOLE if t == C_MASK else EOS_KIND if t == C_EOS else t for t in row[1:]])
        holes = np.flatnonzero(kinds == HOLE)
        ids, eos = allowed_tokens(grammar.grammar, grammar.lexer, kinds, kinds, len(kinds), holes, len(SPELLED))
        for k, hole in enumerate(holes):
            expected = set(np.flatnonzero(ids[k]).tolist()) | ({C_EOS} if eos[k] else set())
            assert set(torch.isfinite(whole[n, hole]).nonzero().flatten().tolist()) == expected, (n, hole)
        alone = CanvasConstraints([rows[n]], C_MASK, [C_EOS]).mask_logits(_state([row], 1, 5), logits[n : n + 1])
        assert torch.equal(alone[0], whole[n])
    assert torch.isinf(whole[0, :, 8]).all() and torch.isinf(whole[1, 1:3, 8]).all()  # past the tokenizer
    assert torch.isfinite(whole[0, 0, 2]) and torch.equal(whole[1, [0, 3]], logits[1, [0, 3]])  # decided: as they were
    for start, stop in [(0, 4), (4, 9), (2, 7)]:
        shard = CanvasConstraints(rows, C_MASK, [C_EOS]).mask_logits(_state(canvas, 1, 5), logits[..., start:stop],
                                                                     vocab_start=start)
        assert torch.equal(shard, whole[..., start:stop]), (start, stop)


@pytest.mark.parametrize("cap, kept", [(0, False), (10**9, True)])
def test_a_chart_past_the_cap_is_let_go_once_its_canvas_is_answered(monkeypatch, cap, kept):
    """A row keeps its chart for the next canvas only under HELD_CHART_ITEMS (a batch of long
    grammar rows would hold hundreds of MB each); let go, the next canvas parses afresh and
    answers alike."""
    from dllm.samplers.constraints import compile_grammar, token_grammar

    from test_canvas_check import EOS as C_EOS, MASK as C_MASK, SPELLED

    monkeypatch.setattr(token_grammar, "HELD_CHART_ITEMS", cap)
    grammar = compile_grammar('start: "a" start "b" | "c"', SPELLED, C_EOS)
    first = np.array([HOLE] * 5)
    sets = grammar.canvas_sets(first, grammar.start)
    answer = grammar.allowed_classes(sets, np.arange(5))
    assert (sets._parsed.parse is not None) == kept
    again = first.copy()
    again[0] = int(np.flatnonzero(answer[0][0])[0])  # the first hole takes a token it may
    later = grammar.canvas_sets(again, grammar.start, held=(first, sets))
    fresh = grammar.canvas_sets(again, grammar.start)
    got, expected = grammar.allowed_classes(later, np.arange(1, 5)), grammar.allowed_classes(fresh, np.arange(1, 5))
    assert (got[0] == expected[0]).all() and (got[1] == expected[1]).all()
    assert later.completable() == fresh.completable()
