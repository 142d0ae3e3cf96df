"""What the constraint tests' brute-force oracles share: every filling of a canvas's holes, and
Lark's verdict on a sentence of a grammar."""
from __future__ import annotations

import functools
import itertools
from typing import Callable, Sequence


def fillings(canvas: Sequence[int], values: Sequence[int], eos: int, mask: int,
             accepts: Callable[[list[int]], bool]) -> list[list[int]]:
    """Every filling of ``canvas``'s ``mask`` positions with ``values`` that is w + ``eos``* with
    ``accepts(w)`` (w: the ids before the first end-of-text)."""
    holes = [i for i, t in enumerate(canvas) if t == mask]
    found = []
    for chosen in itertools.product(values, repeat=len(holes)):
        filled = list(canvas)
        for i, v in zip(holes, chosen):
            filled[i] = v
        end = filled.index(eos) if eos in filled else len(filled)
        if all(t == eos for t in filled[end:]) and accepts(filled[:end]):
            found.append(filled)
    return found


def lark_verdicts(text: str) -> Callable[[str], bool]:
    """Whether Lark's Earley parser (every split of the text into terminals) accepts a sentence of
    the grammar ``text``, each sentence decided once."""
    import lark

    reference = lark.Lark(text, parser="earley", lexer="dynamic_complete")

    @functools.cache
    def parses(sentence: str) -> bool:
        try:
            reference.parse(sentence)
        except lark.exceptions.LarkError:
            return False
        return True

    return parses
