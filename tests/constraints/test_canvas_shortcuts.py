"""The canvas check's shortcuts against brute force (test_canvas_check.py's oracle): completability
from the backward pass alone, and from a held canvas's sets walked only where a trial canvas
differs (the commit filter's), agree with whether some filling is a word, and the sets computed
from a held canvas's are those computed afresh; a tensor-parallel
shard's mask is its columns of the whole vocabulary's mask, and a batch's masks are each row's alone."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from dllm.samplers.constraints import CanvasConstraints, RowConstraint, compile_regex
from dllm.samplers.constraints.canvas import canvas_sets, completable, completable_between, position_kinds

from test_canvas_check import EOS, MASK, SPELLED, WORDS, _state, _words_of


@pytest.mark.parametrize("pattern", [r"(ab|b)a*", r"a(b|c)+", r"(ba){1,2}c?"])
def test_backward_pass_alone_and_held_sets_decide_as_brute_force(pattern):
    dfa = compile_regex(pattern, SPELLED, EOS)
    eos = np.array([EOS])
    trials = 0
    for length in range(1, 5):
        for held in itertools.product([MASK, EOS, 2, 3], repeat=length):
            held_kinds = position_kinds(dfa, np.array(held), MASK, eos, None)
            assert completable(dfa, held_kinds, dfa.start) == bool(_words_of(list(held), pattern)), held
            sets = canvas_sets(dfa, held_kinds, dfa.start)
            holes = [i for i, t in enumerate(held) if t == MASK]
            for values in itertools.product(WORDS[:3] + [EOS, MASK], repeat=len(holes)):  # commits into the holes
                trial = list(held)
                for i, v in zip(holes, values):
                    trial[i] = v
                kinds = position_kinds(dfa, np.array(trial), MASK, eos, None)
                changed = np.flatnonzero(kinds != held_kinds)
                if len(changed) == 0:
                    continue
                expected = bool(_words_of(trial, pattern))
                assert completable_between(dfa, sets, kinds, changed[0], changed[-1] + 1) == expected, (held, trial)
                fresh = canvas_sets(dfa, kinds, dfa.start)
                reused = canvas_sets(dfa, kinds, dfa.start, held=(held_kinds, sets))
                for field in ("reach", "ended", "ok", "tail_eos"):
                    assert np.array_equal(getattr(reused, field), getattr(fresh, field)), (held, trial, field)
                trials += 1
    assert trials > 500


def test_backward_pass_alone_keeps_the_limit():
    dfa = compile_regex(r"a+", SPELLED, EOS)
    for canvas, limit, expected in [([MASK, MASK, MASK], 1, True), ([2, 2, MASK], 1, False), ([MASK, MASK], 0, False)]:
        kinds = position_kinds(dfa, np.array(canvas), MASK, np.array([EOS]), limit)
        assert completable(dfa, kinds, dfa.start, limit) is expected


def test_a_shard_masks_its_columns_and_a_batch_masks_each_row_as_alone():
    dfa = compile_regex(r"(ab|ba)c?", SPELLED, EOS)
    other = compile_regex(r"a(b|c)+", SPELLED, EOS)
    canvas = [[7, 2, MASK, MASK, MASK], [7, MASK, MASK, MASK, EOS], [7, 3, MASK, MASK, MASK]]
    rows = [RowConstraint(dfa=dfa), RowConstraint(dfa=other), None]
    logits = torch.randn(3, 4, 9, generator=torch.Generator().manual_seed(0))  # 9: one id past the tokenizer
    state = _state(canvas, 1, 5)
    whole = CanvasConstraints(rows, MASK, [EOS]).mask_logits(state, logits)
    assert torch.equal(whole[2], logits[2]) and torch.isinf(whole[0, 1:, 8]).all()  # free row; past the tokenizer
    for start, stop in [(0, 4), (4, 9), (2, 7)]:
        shard = CanvasConstraints(rows, MASK, [EOS]).mask_logits(state, logits[..., start:stop], vocab_start=start)
        assert torch.equal(shard, whole[..., start:stop]), (start, stop)
    for n in range(2):
        alone = CanvasConstraints([rows[n]], MASK, [EOS]).mask_logits(_state([canvas[n]], 1, 5), logits[n : n + 1])
        assert torch.equal(alone[0], whole[n])
    finite = torch.isfinite(whole[0])  # "a" decided: then "b", then "c" or end-of-text
    assert finite[1].nonzero().flatten().tolist() == [3]
    assert finite[2].nonzero().flatten().tolist() == [EOS, 6]


def test_the_host_mask_keeps_the_callers_logits_and_masks_every_dtype_alike():
    """The mask is written into a new tensor (numpy's on the host for the dtypes it holds, torch's
    for bfloat16): the caller's logits stay as they were (APD mixes them, uniform keeps them)."""
    rows = [RowConstraint(dfa=compile_regex(r"(ab|ba)c?", SPELLED, EOS)), None]
    canvas = [[7, 2, MASK, MASK, MASK], [7, MASK, MASK, MASK, EOS]]
    logits = torch.randn(2, 4, 9, generator=torch.Generator().manual_seed(1))
    before = logits.clone()
    out = CanvasConstraints(rows, MASK, [EOS]).mask_logits(_state(canvas, 1, 5), logits)
    assert torch.equal(logits, before) and torch.isinf(out).any()
    assert torch.equal(out, logits.masked_fill(torch.isinf(out), float("-inf")))
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        other = CanvasConstraints(rows, MASK, [EOS]).mask_logits(_state(canvas, 1, 5), logits.to(dtype))
        assert other.dtype == dtype and torch.equal(torch.isinf(other), torch.isinf(out)), dtype
