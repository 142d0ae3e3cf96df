"""generate(..., regex=, choice=, json_schema=) on tiny random models: every answer is a word of
its language (Python's re and jsonschema decide, not the code under test), under greedy and
sampled decoding, every registered rule and every cache; a ragged batch with a constraint per row decodes
each row as its single run; what is not covered is refused before any model work."""
from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch

from dllm import GenerationConfig
from dllm.engine.decoding import Decoding, RowStart, decode
from dllm.samplers.constraints import RowConstraint, compile_regex, json_answer_errors, token_bytes
from tests.rule_configs import RULE_OPTIONS, VARIANTS, rule_config, save_filter

PROMPTS = ["hello there", "a much longer prompt that goes on", "x"]
NAMES = r"\[\"[A-Z][a-z]{1,6}\"(, \"[A-Z][a-z]{1,6}\")*\]"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer"}}, "required": ["name", "age"]}


def _dfa(lm, regex):
    return compile_regex(regex, tuple(token_bytes(lm.tokenizer, lm.model.config.vocab_size)), lm.model.eos_token_ids[0])


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("options", [
    dict(),
    dict(temperature=1.0, seed=5),
    dict(policy="threshold", policy_args={"tau": 0.2}, cache="prefix", block_length=16),
    dict(cache="dual", block_length=16, temperature=0.7),
])
def test_every_answer_is_a_word(tiny_models, family, options):
    lm = tiny_models[family]
    free = lm.generate(PROMPTS, max_tokens=32, chat=False, **options)
    assert not all(re.fullmatch(NAMES, t) for t in free.texts)  # a random model does not write these alone
    out = lm.generate(PROMPTS, max_tokens=32, chat=False, regex=NAMES, **options)
    for text, ids in zip(out.texts, out.token_ids):
        assert re.fullmatch(NAMES, text), text
        assert len(ids) <= 33  # the word, then at most its end-of-text
    out = lm.generate(PROMPTS, max_tokens=24, chat=False, choice=["yes", "no", "maybe not"], **options)
    assert all(t in ("yes", "no", "maybe not") for t in out.texts), out.texts
    assert out.finish_reasons == ["eos"] * 3
    out = lm.generate(PROMPTS, max_tokens=48, chat=False, json_schema=SCHEMA, **options)
    for text in out.texts:
        assert json_answer_errors(text, SCHEMA) is None, text


def test_max_tokens_not_a_block_multiple_ends_the_word_in_time(tiny_models):
    lm = tiny_models["llada"]
    out = lm.generate(PROMPTS, max_tokens=13, block_length=8, chat=False, regex=r"[a-z ]{1,40}")
    for text, ids, reason in zip(out.texts, out.token_ids, out.finish_reasons):
        assert re.fullmatch(r"[a-z ]{1,40}", text) and reason in ("eos", "length")
        assert len(ids) <= 14


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_ragged_rows_each_with_its_constraint_decode_as_alone(tiny_models, family):
    lm = tiny_models[family]
    config = GenerationConfig(gen_length=32, block_length=8, temperature=0.9, seed=3)
    constraints = [RowConstraint(dfa=_dfa(lm, NAMES)), None, RowConstraint(dfa=_dfa(lm, r"(yes|no)!*"), limit=12)]
    prompts = [lm.encode(p, chat=False) for p in PROMPTS]
    rows = [RowStart(prefix=p, gen_length=g, seed=s, constraint=c)
            for p, g, s, c in zip(prompts, (32, 16, 24), (1, 2, 3), constraints)]
    batch = Decoding(lm.model, rows, config).run()
    for i, row in enumerate(rows):
        alone = Decoding(lm.model, [row], config).run()
        G = row.gen_length
        assert torch.equal(batch.answer[i, :G], alone.answer[0, :G]), i
        assert torch.equal(batch.nfe[i], alone.nfe[0])
    texts = lm.to_output(batch).texts
    assert re.fullmatch(NAMES, texts[0]) and re.fullmatch(r"(yes|no)!*", texts[2])


def test_a_row_resumed_at_a_block_boundary_keeps_its_language(tiny_models):
    lm = tiny_models["llada"]
    config = GenerationConfig(gen_length=32, block_length=16)
    prompt = lm.encode("hello", chat=False)
    constraint = RowConstraint(dfa=_dfa(lm, NAMES), limit=30)
    whole = decode(lm.model, [prompt], config, constraints=[constraint]).answer[0].tolist()
    first = whole[:16]
    resumed = Decoding(lm.model, [RowStart(prefix=prompt + first, gen_length=16, answer_offset=16,
                                           constraint=constraint)], config).run()
    assert resumed.answer[0].tolist() == whole[16:]
    assert re.fullmatch(NAMES, lm.to_output(decode(lm.model, [prompt], config, constraints=[constraint])).texts[0])


def test_block_causal_rows_with_prompt_tails(tmp_path):
    from tests.block_causal_tiny import tiny_block_causal
    import dllm

    model = tiny_block_causal(tmp_path / "v2", "fast_dllm_v2")
    lm = dllm.load(tmp_path / "v2")
    assert lm.model.attention == "block_causal"
    config = GenerationConfig(gen_length=16, block_length=4)
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12, 13]]  # tails of 3 and 2 tokens lead their answers
    dfa = _dfa(lm, r"(yes|no)( (yes|no))*")
    constraints = [RowConstraint(dfa=dfa), RowConstraint(dfa=dfa, limit=9)]
    batch = decode(model, prompts, config, constraints=constraints)
    for i, text in enumerate(lm.to_output(batch).texts):
        assert re.fullmatch(r"(yes|no)( (yes|no))*", text), text
        alone = decode(model, [prompts[i]], config, constraints=[constraints[i]])
        assert torch.equal(batch.answer[i], alone.answer[0])


@pytest.mark.parametrize("options, fix", [
    (dict(stop="]"), "drop the stops"),
    (dict(stop_token_ids=[7]), "drop the stops"),
    (dict(choice=["a"], json_schema=SCHEMA), "give one of"),
    (dict(regex="a(b"), "cannot be compiled"),
    (dict(json_schema={"type": 5}), "not a valid JSON Schema"),
    (dict(regex=r"(ab){300}", max_tokens=8), "raise max_tokens"),  # 600 characters in 8 tokens
    (dict(choice="yes"), "non-empty list"),
])
def test_what_is_not_covered_is_refused_before_any_model_work(tiny_models, monkeypatch, options, fix):
    lm = tiny_models["llada"]
    monkeypatch.setattr(lm.model, "forward", lambda *a, **k: pytest.fail("a forward ran"))
    options = {"regex": NAMES, "max_tokens": 32, **options}
    if "choice" in options or "json_schema" in options:
        options.pop("regex")
    if "json_schema" in options and "choice" in options:
        options["regex"] = NAMES
        options.pop("choice")
    with pytest.raises((ValueError, TypeError)) as err:
        lm.generate(["hi"], chat=False, **options)
    assert fix in str(err.value)



def test_max_tokens_of_the_shortest_word_is_enough(tiny_models):
    """A constraint whose shortest word takes k tokens fits max_tokens = k (the answer is then a
    word of at most k tokens) and is refused, naming the fix, at k - 1."""
    lm = tiny_models["llada"]
    k = _dfa(lm, NAMES).shortest_word()
    assert k is not None and k > 1
    out = lm.generate(["hi"], chat=False, regex=NAMES, max_tokens=k, block_length=k)
    assert re.fullmatch(NAMES, out.texts[0]) and len(out.token_ids[0]) <= k + 1, out.texts[0]
    with pytest.raises(ValueError, match="raise max_tokens"):
        lm.generate(["hi"], chat=False, regex=NAMES, max_tokens=k - 1)

def test_what_composes_passes_the_check_and_the_rest_is_refused_by_name():
    from dllm.samplers.constraints import check_supported

    for options in (dict(block_add_threshold=0.1), dict(strategy="freedave"), dict(strategy="ssd"),
                    dict(strategy="lopa"), dict(strategy="apd"), dict(strategy="guided"), dict(strategy="uniform"),
                    dict(stopper="eotp"), dict(stopper="sched"), dict(stopper="prophet"), dict(edit_threshold=0.9)):
        check_supported(GenerationConfig(gen_length=32, block_length=8, **options))
    # a strategy registered later is refused until it joins the covered list with its test
    with pytest.raises(ValueError, match="strategy 'new' has not been made to keep a constrained canvas completable"):
        check_supported(dataclasses.replace(GenerationConfig(gen_length=32, block_length=8), strategy="new"))


def test_the_engine_refuses_a_canvas_that_holds_no_word(tiny_models, monkeypatch):
    lm = tiny_models["llada"]
    dfa = _dfa(lm, r"(ab){300}")
    assert dfa.shortest_word() > 8
    assert _dfa(lm, r"[a-z]").shortest_word() == 1 and _dfa(lm, r"").shortest_word() == 0
    monkeypatch.setattr(lm.model, "forward", lambda *a, **k: pytest.fail("a forward ran"))
    with pytest.raises(ValueError, match="row 1: no word .* fits in 8 answer tokens"):
        decode(lm.model, [[5, 6], [7]], GenerationConfig(gen_length=8), constraints=[None, RowConstraint(dfa=dfa)])


def _ragged_words_as_alone(lm, config: GenerationConfig) -> None:
    """Two ragged rows, each under its own regex: every answer a word (the tiny model's free
    answers are not), each row of the batch its single run."""
    patterns = [r"(yes|no)( (yes|no))*", r"[a-z]{2,5}( [a-z]{2,5})?"]
    rows = [RowStart(prefix=lm.encode(p, chat=False), gen_length=config.gen_length, seed=s,
                     constraint=RowConstraint(dfa=_dfa(lm, r))) for p, s, r in zip(PROMPTS[:2], (1, 2), patterns)]
    free = lm.to_output(Decoding(lm.model, [dataclasses.replace(r, constraint=None) for r in rows], config).run())
    assert not any(re.fullmatch(p, t) for p, t in zip(patterns, free.texts))
    batch = Decoding(lm.model, rows, config).run()
    texts = lm.to_output(batch).texts
    for i, (row, pattern) in enumerate(zip(rows, patterns)):
        assert re.fullmatch(pattern, texts[i]), texts[i]
        assert torch.equal(batch.answer[i], Decoding(lm.model, [row], config).run().answer[0]), i


@pytest.mark.parametrize("rule", sorted(RULE_OPTIONS) + sorted(VARIANTS))
def test_every_rule_answers_words_in_a_ragged_batch_as_alone(tiny_models, tmp_path, rule):
    """Each registered unmasking rule (and each variant the rule tests use), sampled."""
    options = rule_config(rule, save_filter(tmp_path / "filter", 6) if rule == "learn2pd" else "")
    _ragged_words_as_alone(tiny_models["llada"], GenerationConfig(gen_length=12, block_length=6, temperature=0.8,
                                                                  seed=1, **options))


CACHES = {"none": dict(cache="none"), "prefix": dict(cache="prefix"), "dual": dict(cache="dual"),
          "adaptive": dict(cache="adaptive", cache_args={"drift": 0.02, "from_layer": 0, "cover": 0.5}),
          "adaptive_window": dict(cache="adaptive", cache_args={"select": "window", "drift": 0.02, "scope": "all",
                                                                "ratio": 0.5, "from_layer": 0}),
          "dual_sub_block": dict(cache="dual", sub_block_length=4),
          "prefix_refresh": dict(cache="prefix", cache_args={"refresh_every": 2})}


@pytest.mark.parametrize("cache", CACHES)
def test_every_cache_answers_words_in_a_ragged_batch_as_alone(tiny_models, cache):
    """Each cache of the registry (adaptive with refreshes that fire, sub-blocks, periodic refresh;
    the encoder cache is DiffusionGemma's, under a constraint in test_constrained_strategies.py)."""
    _ragged_words_as_alone(tiny_models["llada"], GenerationConfig(gen_length=16, block_length=8, **CACHES[cache]))


@pytest.mark.parametrize("sampling", [dict(temperature=0.7, top_p=0.9), dict(temperature=1.0, top_k=20)],
                         ids=["top_p", "top_k"])
def test_top_p_and_top_k_sampling_answer_words_as_alone(tiny_models, sampling):
    """Truncated sampling draws from the constrained distribution's top (the mask comes first)."""
    _ragged_words_as_alone(tiny_models["dream"], GenerationConfig(gen_length=12, block_length=6, seed=4, **sampling))
