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
all be end-of-text. One pass each way, O(positions x edges) at worst (a hole spreads a set along
the DFA's state-to-state edges, a token moves it by one table column), in numpy on the host.
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


def _advance(dfa: TokenDFA, reach: np.ndarray, ended: bool, kind: int) -> tuple[np.ndarray, bool]:
    """The states some filling reaches (and whether a word may have ended) one position of
    ``kind`` after ``reach`` (``ended``). A hole spreads the states along ``dfa.edges``: O(edges),
    not O(states^2)."""
    after = np.zeros_like(reach)
    if kind >= 0:
        after[dfa.table[reach, kind]] = True
        after[-1] = False  # the dead state
        return after, False
    ended = ended or bool((reach & dfa.final).any())
    if kind == HOLE:
        sources, targets = dfa.edges
        after[targets[reach[sources]]] = True
    return after, ended


def _retreat(dfa: TokenDFA, ok: np.ndarray, tail_eos: bool, kind: int) -> np.ndarray:
    """The states from which one position of ``kind`` and then the positions of ``ok``
    (``tail_eos``: all may be end-of-text) can be filled to end a word."""
    if kind >= 0:
        return ok[dfa.table[:, kind]]
    before = dfa.final & tail_eos  # the word ends here
    if kind == HOLE:
        sources, targets = dfa.edges
        before[sources[ok[targets]]] = True
    return before


def canvas_sets(dfa: TokenDFA, kinds: np.ndarray, start: int, limit: int | None = None,
                held: tuple[np.ndarray, CanvasSets] | None = None) -> CanvasSets:
    """Forward and backward sets over the positions ``kinds`` from DFA state ``start``. A run of
    holes stops recomputing once its set repeats (it then repeats to the run's end). ``held``:
    the kinds and sets of a canvas of the same length, start and limit (the last step's): only
    from its first differing position on (forward) and from its last one back (backward) are the
    sets computed, each pass stopping once past the difference its set meets the held one again
    (the same positions follow, so the same sets). A grammar (token_grammar.py) answers for itself."""
    if not isinstance(dfa, TokenDFA):
        return dfa.canvas_sets(kinds, start, limit, held)
    L, S1 = len(kinds), dfa.num_states
    lo, hi = 0, L
    if held is not None and len(held[0]) == L:
        changed = np.flatnonzero(held[0] != kinds)
        if len(changed) == 0:
            return held[1]
        lo, hi, old = int(changed[0]), int(changed[-1]) + 1, held[1]
        reach, ended, ok, tail_eos = old.reach.copy(), old.ended.copy(), old.ok.copy(), old.tail_eos.copy()
    else:
        old = None
        reach = np.zeros((L + 1, S1), dtype=bool)
        ended = np.zeros(L + 1, dtype=bool)
        reach[0, start] = True
        ok = np.zeros((L + 1, S1), dtype=bool)
        tail_eos = np.ones(L + 1, dtype=bool)
        ok[L] = dfa.final
    for i in range(lo, L):
        kind = kinds[i]
        if (kind == HOLE and i > 0 and kinds[i - 1] == HOLE and (ended[i] or not (reach[i] & dfa.final).any())
                and (reach[i] == reach[i - 1]).all()):
            reach[i + 1], ended[i + 1] = reach[i], ended[i]
        else:
            reach[i + 1], ended[i + 1] = _advance(dfa, reach[i], bool(ended[i]), kind)
        if (old is not None and i + 1 >= hi and ended[i + 1] == old.ended[i + 1]
                and (reach[i + 1] == old.reach[i + 1]).all()):
            break
    for i in range(hi - 1, -1, -1):
        kind = kinds[i]
        tail_eos[i] = kind < 0 and tail_eos[i + 1]
        if (kind == HOLE and i + 1 < L and kinds[i + 1] == HOLE and tail_eos[i + 1] == tail_eos[i + 2]
                and (ok[i + 1] == ok[i + 2]).all()):
            ok[i] = ok[i + 1]
        else:
            ok[i] = _retreat(dfa, ok[i + 1], bool(tail_eos[i + 1]), kind)
        if old is not None and i <= lo and tail_eos[i] == old.tail_eos[i] and (ok[i] == old.ok[i]).all():
            break
    return CanvasSets(reach=reach, ended=ended, ok=ok, tail_eos=tail_eos, limit=L if limit is None else limit)


def completable(dfa: TokenDFA, kinds: np.ndarray, start: int, limit: int | None = None) -> bool:
    """``canvas_sets(...).completable(start)`` from the backward pass alone (a commit filter asks
    only this), keeping one set at a time."""
    if not isinstance(dfa, TokenDFA):
        return dfa.canvas_sets(kinds, start, limit).completable(start)
    ok, tail_eos = dfa.final.copy(), True
    later = None  # the set one position further on, when that position is a hole
    for i in range(len(kinds) - 1, -1, -1):
        kind = kinds[i]
        if kind == HOLE and later is not None and (ok == later).all():
            continue  # a run of holes repeats its set from here on (and keeps tail_eos)
        before = _retreat(dfa, ok, tail_eos, kind)
        later = ok if kind == HOLE else None
        ok, tail_eos = before, kind < 0 and tail_eos
    return bool(ok[start])


def completable_between(dfa: TokenDFA, sets: CanvasSets, kinds: np.ndarray, lo: int, hi: int) -> bool:
    """Whether the canvas ``kinds`` is completable, given the sets of a canvas of the same
    length and start that differs from it only in positions [lo, hi): the forward sets before lo
    and the backward sets from hi on are the same, so only lo..hi is walked; completable iff some
    state reached at hi can still end a word, or a word ended before hi and every later position
    may be end-of-text."""
    reach, ended = sets.reach[lo], bool(sets.ended[lo])
    for kind in kinds[lo:hi]:
        reach, ended = _advance(dfa, reach, ended, kind)
    return bool((reach & sets.ok[hi]).any()) or (ended and bool(sets.tail_eos[hi]))


def allowed_classes(dfa: TokenDFA, sets: CanvasSets, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For holes at ``positions`` (K,): (K, C) bool, the token classes that keep the canvas
    completable, and (K,) bool, whether end-of-text does."""
    if not isinstance(dfa, TokenDFA):
        return dfa.allowed_classes(sets, positions)
    reach = sets.reach[positions]  # (K, S + 1)
    after = sets.ok[positions + 1]  # (K, S + 1)
    # a class is allowed where some reached state's move by it can still end a word: over the
    # live moves only (a move to the dead state never can), O(K x moves), not O(K x S x C)
    states, targets, present, starts = dfa.moves
    classes = np.zeros((len(positions), dfa.table.shape[1]), dtype=bool)
    if len(states):
        classes[:, present] = np.logical_or.reduceat(reach[:, states] & after[:, targets], starts, axis=1)
    classes[positions >= sets.limit] = False
    eos = (sets.ended[positions] | (reach & dfa.final[None, :]).any(1)) & sets.tail_eos[positions + 1]
    return classes, eos
