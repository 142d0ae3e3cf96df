"""The regular-language canvas check (token DFA) on random small regexes against brute force
(Python's ``re.fullmatch`` decides each filling): concatenation, alternation, classes, negated
classes, ``.`` and every quantifier, over tokens that span several characters, on every canvas of
up to three positions of holes, tokens and end-of-text. The hand-written patterns of
tests/constraints/test_canvas_check.py pin named cases; these reach shapes nobody wrote down."""
from __future__ import annotations

import itertools
import random
import re

import numpy as np
import pytest

from dllm.samplers.constraints import compile_regex
from dllm.samplers.constraints.canvas import allowed_classes, canvas_sets, position_kinds
from tests.constraints.brute_fillings import fillings

EOS, MASK = 0, 1
SPELLED = (None, None, b"a", b"b", b"ab", b"ba", b"c", b"cc", None)  # 0: end-of-text, 1: mask, 8: special
WORDS = [2, 3, 4, 5, 6, 7]
CANVAS_VALUES = [MASK, EOS, *WORDS]
PATTERNS = 10


def random_regex(rng: random.Random, depth: int = 0) -> str:
    """A regex over a, b, c of nested concatenations, alternations and quantified groups."""
    draw = rng.random()
    if depth > 2 or draw < 0.35:
        return rng.choice(["a", "b", "c", "[ab]", "[^a]", "."])
    if draw < 0.55:
        return random_regex(rng, depth + 1) + random_regex(rng, depth + 1)
    if draw < 0.7:
        return f"({random_regex(rng, depth + 1)}|{random_regex(rng, depth + 1)})"
    return f"({random_regex(rng, depth + 1)})" + rng.choice(["*", "+", "?", "{1,2}", "{2}", "{0,3}"])


def _patterns() -> list[str]:
    """PATTERNS distinct regexes with some structure (a lone class says little)."""
    rng, found = random.Random(0), []
    while len(found) < PATTERNS:
        pattern = random_regex(rng)
        if len(pattern) >= 5 and pattern not in found:
            found.append(pattern)
    return found


@pytest.mark.parametrize("pattern", _patterns(), ids=[f"regex{k}" for k in range(PATTERNS)])
def test_random_regex_canvases_match_brute_force(pattern):
    dfa = compile_regex(pattern, SPELLED, EOS)
    for length in (1, 2, 3):
        for canvas in itertools.product(CANVAS_VALUES, repeat=length):
            holes = [i for i, t in enumerate(canvas) if t == MASK]
            words = fillings(canvas, WORDS + [EOS], EOS, MASK, lambda w: re.fullmatch(
                pattern, b"".join(SPELLED[t] for t in w).decode(), re.S) is not None)
            tokens = np.array(canvas)
            kinds = position_kinds(dfa, tokens, MASK, np.array([EOS]), None)
            sets = canvas_sets(dfa, kinds, dfa.start)
            assert sets.completable(dfa.start) == bool(words), canvas
            if not words or not holes:
                continue
            classes, eos = allowed_classes(dfa, sets, np.array(holes))
            for k, pos in enumerate(holes):
                got = {t for t in WORDS if classes[k, dfa.token_class[t]]} | ({EOS} if eos[k] else set())
                assert got == {w[pos] for w in words}, (canvas, pos)
