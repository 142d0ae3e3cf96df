"""Stoppers under a constraint, on a tiny random model: SchED / Prophet's all-in fill commits only
what keeps the canvas completable and EoTP cuts only where a word still fits, so every answer is a
word of its language (Python's re decides); the stoppers still end rows early, and a ragged batch
with a constraint per row equals its single runs."""
from __future__ import annotations

import re

import pytest

from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.samplers.constraints import RowConstraint, compile_regex, token_bytes

PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13], [100, 3]]
NAMES = r"\[\"[A-Z][a-z]{1,6}\"(, \"[A-Z][a-z]{1,6}\")*\]"
YESNO = r"(yes|no)( (yes|no))*"
LONG = r"(yes|no)( (yes|no)){5,}"  # six words at least


def _dfa(lm, regex):
    return compile_regex(regex, tuple(token_bytes(lm.tokenizer, lm.model.config.vocab_size)), lm.model.eos_token_ids[0])


def _words(lm, result, constraints) -> None:
    for text, constraint in zip(lm.to_output(result).texts, constraints):
        if constraint is not None:
            assert re.fullmatch(constraint.dfa.regex, text), text


@pytest.mark.parametrize("stopper, args, cache", [
    ("sched", {"tau_high": 1.0, "tau_low": 0.5}, "none"),
    ("prophet", {"thresholds": (1.0, 0.5, 0.2)}, "dual"),
], ids=["sched", "prophet-dual"])
def test_all_in_fill_keeps_every_answer_a_word(tiny_models, stopper, args, cache):
    lm = tiny_models["llada"]
    constraints = [RowConstraint(dfa=_dfa(lm, NAMES)), None, RowConstraint(dfa=_dfa(lm, YESNO), limit=11)]
    cfg = GenerationConfig(gen_length=32, block_length=8, stopper=stopper, stopper_args=args, cache=cache)
    out = decode(lm.model, PROMPTS, cfg, constraints=constraints)
    _words(lm, out, constraints)
    # one token per step, the constrained rows take 32 and 16 forwards without a stopper
    assert int(out.nfe[0]) + int(out.nfe[2]) < 48  # the stopper ended them early


def test_eotp_cuts_only_where_a_word_fits_and_rows_decode_as_alone(tiny_models):
    """The cut itself is refused where no word fits (test_canvas_check.py); here a decode."""
    lm = tiny_models["llada"]
    constraints = [RowConstraint(dfa=_dfa(lm, LONG)), None, RowConstraint(dfa=_dfa(lm, YESNO), limit=11)]
    cfg = GenerationConfig(gen_length=32, block_length=8, stopper="eotp")
    batch = decode(lm.model, PROMPTS, cfg, constraints=constraints)
    _words(lm, batch, constraints)
    assert int(batch.nfe[2]) < 16  # EoTP cut the constrained row (one token per step: 16 forwards uncut)
    for row in (0, 2):  # the constrained rows (a free row alone: tests/samplers/test_composition.py)
        alone = decode(lm.model, [PROMPTS[row]], cfg, constraints=[constraints[row]])
        assert batch.answer[row].tolist() == alone.answer[0].tolist()
        assert int(batch.nfe[row]) == int(alone.nfe[0])
