"""The context-free canvas check on random small grammars against brute force (Lark's Earley
parser decides each filling): recursive, nullable (``x?``, empty alternatives) and mutually
recursive rules over three terminals, with and without an %ignore'd space, on every canvas of up
to three positions of holes, tokens and end-of-text. Hand-written grammars miss what the
terminals' numbering decides (the augmented start once shared terminal 0's id)."""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from dllm.samplers.constraints.canvas import EOS as EOS_KIND
from dllm.samplers.constraints.canvas import HOLE
from dllm.samplers.constraints.cfg_canvas import allowed_tokens, completable
from dllm.samplers.constraints.grammar import parse_grammar
from dllm.samplers.constraints.lexer import build_lexer
from tests.constraints.brute_fillings import fillings, lark_verdicts

lark = pytest.importorskip("lark")

EOS, MASK = 0, 1
VOCAB = (None, None, b"a", b"b", b"c", b"ab", b"ba", b"bc", b" ", b"a ", None)  # tokens span terminals
CANVAS_VALUES = [MASK, EOS, 2, 3, 5, 8]
GRAMMARS = 12


def random_grammar(rng: random.Random) -> str:
    """A Lark grammar of 1-3 rules with 1-3 alternatives each over "a", "b", "c" and the rules."""
    names = ["start", "x", "y"][: rng.randint(1, 3)]
    lines = []
    for name in names:
        alternatives = []
        for _ in range(rng.randint(1, 3)):
            symbols = [rng.choice(['"a"', '"b"', '"c"']) if rng.random() < 0.55
                       else rng.choice(names) + rng.choice(["", "", "?"])
                       for _ in range(rng.randint(1 if name == "start" else 0, 3))]
            alternatives.append(" ".join(symbols))
        lines.append(f"{name}: " + " | ".join(a for a in alternatives if a) if any(alternatives) else f'{name}: "a"')
    if rng.random() < 0.3:
        lines.append('%ignore " "')
    return "\n".join(lines) + "\n"


def _grammars() -> list[str]:
    rng, found = random.Random(0), []
    while len(found) < GRAMMARS:
        text = random_grammar(rng)
        try:
            parse_grammar(text)
            lark.Lark(text, parser="earley", lexer="dynamic_complete")
        except Exception:  # a rule never reached or a grammar Lark refuses: draw another
            continue
        found.append(text)
    return found


@pytest.mark.parametrize("text", _grammars(), ids=[f"grammar{k}" for k in range(GRAMMARS)])
def test_random_grammar_canvases_match_brute_force(text):
    grammar = parse_grammar(text)
    lexer = build_lexer(grammar, VOCAB, EOS)
    words = [t for t, piece in enumerate(VOCAB) if piece]
    parses = lark_verdicts(text)

    for length in (1, 2, 3):
        for canvas in itertools.product(CANVAS_VALUES, repeat=length):
            holes = [i for i, t in enumerate(canvas) if t == MASK]
            found = fillings(canvas, words + [EOS], EOS, MASK, lambda w: parses(b"".join(VOCAB[t] for t in w).decode()))
            tokens = np.array(canvas)
            kinds = np.where(tokens == MASK, HOLE, np.where(tokens == EOS, EOS_KIND, tokens))
            assert completable(grammar, lexer, kinds, tokens, length) == bool(found), canvas
            if not found or not holes:
                continue
            allowed, eos = allowed_tokens(grammar, lexer, kinds, tokens, length, np.array(holes), len(VOCAB))
            for k, pos in enumerate(holes):
                got = set(np.flatnonzero(allowed[k]).tolist()) | ({EOS} if eos[k] else set())
                assert got == {f[pos] for f in found}, (canvas, pos)
