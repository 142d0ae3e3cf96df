"""The canvas check against brute force: on a small vocabulary, every canvas of holes, tokens and
end-of-text is completable exactly when some filling of its holes is w + end-of-text* with w's
text a match of the regex (Python's re decides), and each hole allows exactly the values some
such filling puts there; commits that are fine alone but not together are thinned, most probable
first."""
from __future__ import annotations

import itertools
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from dllm.samplers.constraints import CanvasConstraints, RowConstraint, compile_regex
from dllm.samplers.constraints.canvas import allowed_classes, canvas_sets, position_kinds

EOS, MASK = 0, 1
SPELLED = (None, None, b"a", b"b", b"ab", b"ba", b"c", None)  # ids 0: eos, 1: mask, 7: special
WORDS = [2, 3, 4, 5, 6]  # ids that write text


def _words_of(canvas: list[int], pattern: str) -> list[list[int]]:
    """Every filling of the canvas's holes that is w + eos* with w's text matching ``pattern``."""
    holes = [i for i, t in enumerate(canvas) if t == MASK]
    found = []
    for values in itertools.product(WORDS + [EOS], repeat=len(holes)):
        filled = list(canvas)
        for i, v in zip(holes, values):
            filled[i] = v
        end = filled.index(EOS) if EOS in filled else len(filled)
        if any(t != EOS for t in filled[end:]) or any(t in (MASK, 7) for t in filled):
            continue
        if re.fullmatch(pattern, b"".join(SPELLED[t] for t in filled[:end]).decode()):
            found.append(filled)
    return found


@pytest.mark.parametrize("pattern", [r"(ab|b)a*", r"a(b|c)+", r"(ba){1,2}c?", r"c?"])
def test_completable_and_allowed_values_match_brute_force(pattern):
    dfa = compile_regex(pattern, SPELLED, EOS)
    values = [MASK, EOS, 2, 3, 4, 5, 6]
    checked = 0
    for length in range(1, 5):
        for canvas in itertools.product(values, repeat=length):
            words = _words_of(list(canvas), pattern)
            tokens = np.array(canvas)
            kinds = position_kinds(dfa, tokens, MASK, np.array([EOS]), None)
            sets = canvas_sets(dfa, kinds, dfa.start)
            assert sets.completable(dfa.start) == bool(words), (pattern, canvas)
            holes = np.flatnonzero(tokens == MASK)
            if not words or len(holes) == 0:
                continue
            classes, eos = allowed_classes(dfa, sets, holes)
            for k, pos in enumerate(holes):
                expected = {w[pos] for w in words}
                got = {t for t in WORDS if classes[k, dfa.token_class[t]]} | ({EOS} if eos[k] else set())
                assert got == expected, (pattern, canvas, pos)
                checked += 1
    assert checked > 20  # the oracle saw holes to compare


def test_limit_ends_the_word_before_it():
    dfa = compile_regex(r"a+", SPELLED, EOS)
    kinds = position_kinds(dfa, np.array([MASK, MASK, MASK]), MASK, np.array([EOS]), limit=1)
    sets = canvas_sets(dfa, kinds, dfa.start, limit=1)
    classes, eos = allowed_classes(dfa, sets, np.array([0, 1, 2]))
    assert classes[0, dfa.token_class[2]] and not classes[0, dfa.token_class[4]] and not eos[0]
    assert not classes[1:].any() and eos[1:].all()  # past the limit: end-of-text only
    kinds = position_kinds(dfa, np.array([2, 2, MASK]), MASK, np.array([EOS]), limit=1)
    assert not canvas_sets(dfa, kinds, dfa.start, limit=1).completable(dfa.start)  # "aa" is past it
    kinds = position_kinds(dfa, np.array([MASK, MASK]), MASK, np.array([EOS]), limit=0)
    assert not canvas_sets(dfa, kinds, dfa.start, limit=0).completable(dfa.start)


def _state(canvas: list[list[int]], bs: int, be: int):
    tokens = torch.tensor(canvas)
    return SimpleNamespace(tokens=tokens, canvas=SimpleNamespace(prompt_width=1), lead=None,
                           end=torch.full((tokens.shape[0],), tokens.shape[1]), bs=bs, be=be,
                           runner=SimpleNamespace(active=torch.ones(tokens.shape[0], dtype=torch.bool)),
                           eligible=lambda states=None: (tokens if states is None else states)[:, bs:be] == MASK)


def test_commits_fine_alone_but_not_together_keep_the_most_probable():
    dfa = compile_regex(r"ab|ba", SPELLED, EOS)
    checks = CanvasConstraints([RowConstraint(dfa=dfa), None], MASK, [EOS])
    state = _state([[7, MASK, MASK, MASK], [7, MASK, MASK, MASK]], 1, 4)
    commit = torch.tensor([[True, True, False], [True, True, False]])
    token = torch.tensor([[2, 2, 0], [2, 2, 0]])  # "a" then "a": each fine alone, "aa" is no word
    scores = torch.tensor([[0.3, 0.9, 0.0], [0.3, 0.9, 0.0]])
    kept = checks.filter_commit(state, commit, token, scores=scores)
    assert kept.tolist() == [[False, True, False], [True, True, False]]  # the free row is untouched
    scores = torch.tensor([[0.9, 0.3, 0.0], [0.3, 0.9, 0.0]])
    assert checks.filter_commit(state, commit, token, scores=scores)[0].tolist() == [True, False, False]


def test_masked_logits_leave_only_completions():
    dfa = compile_regex(r"ab|ba", SPELLED, EOS)
    checks = CanvasConstraints([RowConstraint(dfa=dfa)], MASK, [EOS])
    state = _state([[7, 3, MASK, MASK]], 1, 4)  # "b" decided: then "a", then end-of-text
    logits = checks.mask_logits(state, torch.zeros(1, 3, 8))
    finite = torch.isfinite(logits[0])
    assert finite[0].all()  # decided: not touched
    assert finite[1].nonzero().flatten().tolist() == [2]
    assert finite[2].nonzero().flatten().tolist() == [EOS]


def test_candidate_states_are_checked_each_on_its_own_canvas():
    """FreeDave's drafts, SSD's nodes, LoPA's branches: states (N, L) of canvas rows (N,)."""
    dfa = compile_regex(r"ab|ba", SPELLED, EOS)
    checks = CanvasConstraints([RowConstraint(dfa=dfa), None], MASK, [EOS])
    state = _state([[7, MASK, MASK, MASK], [7, MASK, MASK, MASK]], 1, 4)
    states = torch.tensor([[7, 2, MASK, MASK], [7, 3, MASK, MASK], [7, 3, MASK, MASK]])  # "a", "b"; a free row
    rows = torch.tensor([0, 0, 1])
    finite = torch.isfinite(checks.mask_logits(state, torch.zeros(3, 3, 8), states, rows))
    assert finite[0, 1].nonzero().flatten().tolist() == [3] and finite[1, 1].nonzero().flatten().tolist() == [2]
    assert finite[2].all()
    commit = torch.tensor([[False, True, False]] * 3)
    kept = checks.filter_commit(state, commit, torch.full((3, 3), 3), tokens=states, rows=rows)
    assert kept[:, 1].tolist() == [True, False, True]  # "ab" is a word, "bb" no prefix of one


def test_a_stopper_fills_and_cuts_only_what_keeps_a_word():
    dfa = compile_regex(r"(ab|ba)c?", SPELLED, EOS)
    checks = CanvasConstraints([RowConstraint(dfa=dfa), RowConstraint(dfa=dfa)], MASK, [EOS])
    state = _state([[7, 2, MASK, MASK], [7, 2, MASK, MASK]], 1, 2)
    # SchED / Prophet's all-in fill over the answer (offset: the answer start), most probable first
    fill = torch.tensor([[False, True, True], [False, True, True]])
    token = torch.tensor([[0, 2, 6], [0, 3, 6]])  # "a a c": no word; "a b c": a word
    kept = checks.filter_commit(state, fill, token, scores=torch.tensor([[0, 0.2, 0.9], [0, 0.2, 0.9]]), offset=1)
    assert kept.tolist() == [[False, False, True], [False, True, True]]
    # EoTP: "a" then end-of-text before position 2 is no word, before position 3 may be ("ab")
    assert checks.completable_ends(state, torch.tensor([2, 3])).tolist() == [4, 3]
