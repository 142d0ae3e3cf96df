"""Candidate strategies under a constraint, on tiny random models: FreeDave and SSD give the
constrained one-token-per-step decode token for token (every verified move is the constrained
base step, its statistics masked for its own canvas), greedy and sampled, in ragged batches; LoPA's
anchor and branches are constrained, so its answers are words and a batch equals its single runs."""
from __future__ import annotations

import re

import pytest

from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.samplers.constraints import RowConstraint, compile_regex, token_bytes

PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13], [100, 3]]
NAMES = r"\[\"[A-Z][a-z]{1,6}\"(, \"[A-Z][a-z]{1,6}\")*\]"
YESNO = r"(yes|no)( (yes|no))*"


def _dfa(lm, regex):
    return compile_regex(regex, tuple(token_bytes(lm.tokenizer, lm.model.config.vocab_size)), lm.model.eos_token_ids[0])


def _constraints(lm):
    """A constraint per row, one row free, one with a max_tokens below the canvas."""
    return [RowConstraint(dfa=_dfa(lm, NAMES)), None, RowConstraint(dfa=_dfa(lm, YESNO), limit=11)]


def _check_words(lm, result, constraints):
    texts = lm.to_output(result).texts
    for text, constraint in zip(texts, constraints):
        if constraint is not None:
            assert re.fullmatch(constraint.dfa.regex, text), text


def _cfg(**kw):
    return GenerationConfig(gen_length=16, block_length=8, steps=16, **kw)  # one token per step


GREEDY, SAMPLED = dict(), dict(temperature=0.8, seed=4)


@pytest.mark.parametrize("family, strategy, sampling", [
    ("llada", "freedave", GREEDY), ("dream", "freedave", SAMPLED), ("dream", "ssd", GREEDY), ("llada", "ssd", SAMPLED),
], ids=["freedave-llada-greedy", "freedave-dream-T0.8", "ssd-dream-greedy", "ssd-llada-T0.8"])
def test_lossless_against_the_constrained_stepwise_decode(tiny_models, family, strategy, sampling):
    lm = tiny_models[family]
    strategy = dict(strategy=strategy, strategy_args={"num_drafts": 4})
    constraints = _constraints(lm)
    base = decode(lm.model, PROMPTS, _cfg(**sampling), constraints=constraints)
    fast = decode(lm.model, PROMPTS, _cfg(**strategy, **sampling), constraints=constraints)
    assert fast.answer.tolist() == base.answer.tolist()
    _check_words(lm, fast, constraints)
    assert int(fast.nfe.sum()) < int(base.nfe.sum())  # drafts were accepted: fewer forwards


def test_freedave_with_a_cache_and_a_threshold_base_rule(tiny_models):
    lm = tiny_models["llada"]
    constraints = _constraints(lm)
    kw = dict(gen_length=16, block_length=8, policy="threshold", policy_args={"tau": 0.3}, cache="prefix")
    base = decode(lm.model, PROMPTS, GenerationConfig(**kw), constraints=constraints)
    fast = decode(lm.model, PROMPTS, GenerationConfig(strategy="freedave", **kw), constraints=constraints)
    assert fast.answer.tolist() == base.answer.tolist()
    _check_words(lm, fast, constraints)


@pytest.mark.parametrize("family, sampling", [("llada", GREEDY), ("dream", SAMPLED)], ids=["llada-greedy", "dream-T0.8"])
def test_lopa_branches_are_constrained(tiny_models, family, sampling):
    lm = tiny_models[family]
    constraints = _constraints(lm)
    cfg = GenerationConfig(gen_length=16, block_length=8, policy="threshold", policy_args={"tau": 0.5},
                           strategy="lopa", strategy_args={"branches": 3}, **sampling)
    batch = decode(lm.model, PROMPTS, cfg, constraints=constraints)
    _check_words(lm, batch, constraints)
    for row, prompt in enumerate(PROMPTS):
        single = decode(lm.model, [prompt], cfg, constraints=[constraints[row]])
        assert batch.answer[row].tolist() == single.answer[0].tolist()
        assert int(batch.nfe[row]) == int(single.nfe[0])


def test_freedave_under_a_grammar_equals_its_stepwise_decode(tiny_models):
    """A recursive grammar (the Earley canvas check) composes the same way as a regex."""
    pytest.importorskip("lark")
    lm = tiny_models["llada"]
    nested = 'start: list\nlist: "[" [item ("," item)*] "]"\nitem: list | NAME\nNAME: /[a-z]+/\n'
    kw = dict(chat=False, max_tokens=8, steps=8, block_length=8, grammar=nested)
    base = lm.generate(["hi there", "x"], **kw)
    fast = lm.generate(["hi there", "x"], strategy="freedave", **kw)
    assert fast.token_ids == base.token_ids
    assert fast.texts[0].startswith("[") and fast.texts[0].endswith("]")
