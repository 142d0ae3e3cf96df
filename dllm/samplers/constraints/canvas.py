"""Is a row's canvas still completable into a word of the language, and which values may each
hole take so that it stays so?

The canvas is the row's answer positions: decided tokens, holes (each one token, or end-of-text)
and end-of-text, after which only end-of-text may follow; its completions are the words
w + end-of-text* that fill it. After Mündler et al. ("Constrained Decoding of Diffusion LLMs with
Context-Free Grammars"), the canvas is completable iff the language meets the regular language of
its completions; for a regular language that is reachability in the product of the token DFA and
the positions: ``reach[i]`` the states some filling of positions < i leads to (no end-of-text
yet), ``ended[i]`` whether a word can already have ended before i, and backwards ``ok[i]`` the
states from which positions >= i can be filled to end a word, ``tail_eos[i]`` whether they may
all be end-of-text. One pass each way, O(positions x states^2) at worst, in numpy on the host.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dllm.samplers.constraints.token_dfa import TokenDFA

HOLE, EOS = -1, -2  # position kinds besides a token class


@dataclass(slots=True)
class CanvasSets:
    reach: np.ndarray  # (L + 1, S + 1) bool
    ended: np.ndarray  # (L + 1,) bool
    ok: np.ndarray  # (L + 1, S + 1) bool
    tail_eos: np.ndarray  # (L + 1,) bool
    limit: int  # holes at or past it may only be end-of-text

    def completable(self, start: int) -> bool:
        return bool(self.ok[0, start])


def position_kinds(dfa: TokenDFA, tokens: np.ndarray, mask_id: int, eos_ids: np.ndarray,
                   limit: int | None) -> np.ndarray:
    """(L,) kind of each answer position: a token class, HOLE or EOS; holes at or past
    ``limit`` (the answer's max_tokens) count as end-of-text: the word must end before them (a
    token decided there is in the dead class: the canvas is then not completable)."""
    kinds = dfa.token_class[np.where(tokens == mask_id, 0, tokens)]
    kinds = np.where(tokens == mask_id, HOLE, kinds)
    kinds = np.where(np.isin(tokens, eos_ids), EOS, kinds)
    if limit is not None:  # past the limit a hole is end-of-text, a token no word
        kinds[limit:] = np.where(kinds[limit:] == HOLE, EOS, np.where(kinds[limit:] == EOS, EOS, dfa.dead_class))
    return kinds


def canvas_sets(dfa: TokenDFA, kinds: np.ndarray, start: int, limit: int | None = None) -> CanvasSets:
    """Forward and backward sets over the positions ``kinds`` from DFA state ``start``. A run of
    holes stops recomputing once its set repeats (it then repeats to the run's end). A grammar
    (token_grammar.py) answers for itself."""
    if not isinstance(dfa, TokenDFA):
        return dfa.canvas_sets(kinds, start, limit)
    L, S1 = len(kinds), dfa.num_states
    reach = np.zeros((L + 1, S1), dtype=bool)
    ended = np.zeros(L + 1, dtype=bool)
    reach[0, start] = True
    succ, final, table = dfa.succ, dfa.final, dfa.table
    for i, kind in enumerate(kinds):
        if kind >= 0:
            reach[i + 1, table[reach[i], kind]] = True
            reach[i + 1, S1 - 1] = False
            continue
        ended[i + 1] = ended[i] or bool((reach[i] & final).any())
        if kind == HOLE:
            if i > 0 and kinds[i - 1] == HOLE and ended[i] == ended[i + 1] and (reach[i] == reach[i - 1]).all():
                reach[i + 1] = reach[i]
            else:
                reach[i + 1] = succ[reach[i]].any(0)
    ok = np.zeros((L + 1, S1), dtype=bool)
    tail_eos = np.ones(L + 1, dtype=bool)
    ok[L] = final
    for i in range(L - 1, -1, -1):
        kind = kinds[i]
        if kind >= 0:
            tail_eos[i] = False
            ok[i] = ok[i + 1][table[:, kind]]
            continue
        tail_eos[i] = tail_eos[i + 1]
        ends_here = final & tail_eos[i + 1]
        if kind == EOS:
            ok[i] = ends_here
        elif (i + 1 < L and kinds[i + 1] == HOLE and tail_eos[i + 1] == tail_eos[i + 2]
              and (ok[i + 1] == ok[i + 2]).all()):
            ok[i] = ok[i + 1]
        else:
            ok[i] = ends_here | (succ & ok[i + 1][None, :]).any(1)
    return CanvasSets(reach=reach, ended=ended, ok=ok, tail_eos=tail_eos, limit=L if limit is None else limit)


def allowed_classes(dfa: TokenDFA, sets: CanvasSets, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For holes at ``positions`` (K,): (K, C) bool, the token classes that keep the canvas
    completable, and (K,) bool, whether end-of-text does."""
    if not isinstance(dfa, TokenDFA):
        return dfa.allowed_classes(sets, positions)
    reach = sets.reach[positions]  # (K, S + 1)
    after = sets.ok[positions + 1]  # (K, S + 1)
    lands = after[:, dfa.table]  # (K, S + 1, C): whether each state's move by each class can still end a word
    classes = (reach[:, :, None] & lands).any(1)  # (K, C)
    classes[positions >= sets.limit] = False
    eos = (sets.ended[positions] | (reach & dfa.final[None, :]).any(1)) & sets.tail_eos[positions + 1]
    return classes, eos
