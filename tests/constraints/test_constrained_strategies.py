"""Candidate strategies under a constraint, on tiny random models: FreeDave and SSD give the
constrained one-token-per-step decode token for token (every verified move is the constrained
base step, its statistics masked for its own canvas), greedy and sampled, in ragged batches; LoPA's
anchor and branches are constrained, so its answers are words and a batch equals its single runs.
So do apd, guided (with a tiny helper) and uniform-state decoding (a tiny DiffusionGemma), whose
free answers are not words; guided's constrained answer is its helper's constrained greedy decode."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import dllm
from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.models.tiny import write_tiny_checkpoint
from dllm.samplers.constraints import RowConstraint, compile_regex, token_bytes
from tests.tiny_helper import write_tiny_helper

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


# --- strategies that commit a verifier's choice (apd, guided) or a denoised canvas (uniform) -----

RAGGED = [[15, 17, 42], [7, 8, 9, 10, 11, 12, 13], [100, 3]]  # no id 5: DiffusionGemma's image token


@pytest.fixture(scope="module")
def dream_helper(tiny_dirs, test_device, tmp_path_factory):
    """The tiny Dream model with a tiny Qwen2 helper on its tokenizer (apd's and guided's verifier)."""
    helper = write_tiny_helper(tmp_path_factory.mktemp("helper"), tiny_dirs["dream"], seed=2)
    return dllm.load(tiny_dirs["dream"], device=test_device, dtype="float32", helper=helper)


@pytest.fixture(scope="module")
def tiny_gemma(tmp_path_factory, test_device):
    """A tiny DiffusionGemma (uniform-state: canvases of 8 random tokens, no mask token)."""
    path = write_tiny_checkpoint(tmp_path_factory.mktemp("gemma"), "diffusion_gemma", seed=1)
    return dllm.load(path, device=test_device, dtype="float32")


@pytest.mark.parametrize("model, options", [
    ("dream_helper", dict(strategy="apd", strategy_args={"mixture_weight": 0.7, "max_lookahead": 8})),
    ("dream_helper", dict(strategy="apd", block_length=8, temperature=0.8, seed=3)),
    ("dream_helper", dict(strategy="guided", block_length=8, cache="prefix")),
    ("tiny_gemma", dict(block_length=8, steps=10, seed=5)),
], ids=["apd-greedy", "apd-blocks-T0.8", "guided-prefix-cache", "uniform"])
def test_verified_and_uniform_strategies_answer_words_alike_alone_and_in_a_batch(request, model, options):
    lm = request.getfixturevalue(model)
    cfg = GenerationConfig(**{"gen_length": 16, "block_length": 16, **options})
    constraints = _constraints(lm)
    free = decode(lm.model, RAGGED, cfg)
    batch = decode(lm.model, RAGGED, cfg, constraints=constraints)
    _check_words(lm, batch, constraints)
    free_texts = lm.to_output(free).texts
    for row, constraint in enumerate(constraints):
        if constraint is None:  # a free row beside constrained ones decodes as in a free batch
            assert batch.answer[row].tolist() == free.answer[row].tolist()
            continue
        assert not re.fullmatch(constraint.dfa.regex, free_texts[row])  # the constraint changed the answer
        single = decode(lm.model, [RAGGED[row]], cfg, constraints=[constraint])
        assert batch.answer[row].tolist() == single.answer[0].tolist()
        assert int(batch.nfe[row]) == int(single.nfe[0])


def _helper_constrained_greedy(lm, prompt: list[int], constraint: RowConstraint, n: int) -> list[int]:
    """The helper's greedy decode of ``n`` tokens where each token is the argmax over those after
    which the token DFA can still reach an accepting state in the tokens left (end-of-text where
    the DFA accepts, then only end-of-text): written from the DFA's tables alone."""
    dfa, eos = constraint.dfa, lm.model.eos_token_ids[0]
    room_total = n if constraint.limit is None else min(n, constraint.limit)
    dist = np.where(dfa.final, 0, np.inf)  # fewest tokens from each state to an accepting one
    for _ in range(dfa.num_states):
        dist = np.minimum(dist, 1 + np.where(dfa.succ, dist[None, :], np.inf).min(1))
    helper, state, ids, out = lm.model.helper.model, dfa.start, list(prompt), []
    for i in range(n):
        with torch.no_grad():
            logits = helper(torch.tensor([ids], device=helper.device)).logits[0, -1].double().cpu()
        allowed = np.zeros(logits.shape[0], dtype=bool)
        if not out or out[-1] != eos:
            known = min(len(dfa.token_class), logits.shape[0])
            allowed[:known] = dist[dfa.table[state, dfa.token_class[:known]]] <= room_total - i - 1
            allowed[eos] = bool(dfa.final[state])
        else:
            allowed[eos] = True
        token = int(logits.masked_fill(~torch.from_numpy(allowed), float("-inf")).argmax())
        if token != eos:
            state = int(dfa.table[state, dfa.token_class[token]])
        ids.append(token)
        out.append(token)
    return out


@pytest.mark.parametrize("options", [dict(), dict(block_length=8, cache="dual")], ids=["one_block", "dual_cache"])
def test_constrained_guided_is_the_helpers_constrained_greedy_decode(dream_helper, options):
    """Whatever the diffusion model drafts (the cache changes the drafts), guided commits its
    helper's choice among what keeps the canvas a word: the constrained helper's own decode."""
    lm = dream_helper
    constraints = _constraints(lm)
    cfg = GenerationConfig(**{"gen_length": 16, "block_length": 16, "strategy": "guided", **options})
    batch = decode(lm.model, RAGGED, cfg, constraints=constraints)
    for row, constraint in enumerate(constraints):
        if constraint is not None:
            assert batch.answer[row].tolist() == _helper_constrained_greedy(lm, RAGGED[row], constraint, 16)


@pytest.mark.parametrize("model, options", [
    ("dream_helper", dict(strategy="apd", strategy_args={"mixture_weight": 0.7})),
    ("dream_helper", dict(strategy="guided")),
    ("tiny_gemma", dict()),
], ids=["apd", "guided", "uniform"])
def test_verified_and_uniform_strategies_under_a_grammar(request, model, options):
    """A recursive grammar (the Earley canvas check answers allowed_ids too): the answers parse."""
    lark = pytest.importorskip("lark")
    lm = request.getfixturevalue(model)
    nested = 'start: list\nlist: "[" [item ("," item)*] "]"\nitem: list | NAME\nNAME: /[a-z]+/\n'
    out = lm.generate(["hi there", "x"], chat=False, max_tokens=16, block_length=8, grammar=nested, **options)
    parser = lark.Lark(nested)
    for text in out.texts:
        parser.parse(text)  # raises unless the answer is a word of the grammar
