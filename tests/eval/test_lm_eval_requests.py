"""How the lm-eval model turns requests into ids and answers into text and records: a pair split
as lm-eval's own causal models split it, an empty context conditioned on the start token, an
answer's text without its end-of-text, and a likelihood record counting the greedy check's
forwards beside the estimator's."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

pytest.importorskip("lm_eval")
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.api.model import TemplateLM  # noqa: E402

from dllm.eval.lm_eval import DllmLM  # noqa: E402


@pytest.fixture(scope="module")
def lm(tiny_dirs):
    return DllmLM(pretrained=str(tiny_dirs["llada"]), device="cpu", mc_num=4, batch_size=4)


@pytest.mark.parametrize("context, continuation", [
    ("t", "he end"),  # "the" is one token: the continuation is what the joint text adds, " end"
    ("x ", "lazy"),  # the trailing space moves to the continuation (" l" is one token)
    ("hello", " there"),
])
def test_a_pair_is_split_as_lm_evals_causal_models_split_it(lm, context, continuation):
    theirs = TemplateLM._encode_pair(SimpleNamespace(backend="causal", tok_encode=lm.tok_encode), context,
                                     continuation)
    assert lm._encode_pair(context, continuation) == theirs


def test_an_empty_context_is_the_start_token(lm):
    bos, eos = lm.tokenizer.bos_token_id, lm.model.eos_token_ids[0]
    assert bos is not None and bos != eos  # the arrangement: both exist and differ
    assert lm._encode_pair("", "hello") == ([bos], lm.tok_encode("hello"))


def test_an_answer_s_text_drops_its_end_of_text_and_keeps_max_gen_toks(lm):
    ids = lm.tok_encode("x y z")
    eos = lm.model.eos_token_ids[0]
    assert lm._answer_text([*ids, eos], 16) == "x y z"
    assert lm._answer_text(ids, 16) == "x y z"
    assert lm._answer_text([*ids, eos], 3) == lm.tokenizer.decode(ids[:3])


def test_a_likelihood_record_counts_the_estimate_and_the_greedy_check(tiny_dirs, tmp_path):
    """mc_num 4 in forwards of 4 rows is one forward; the greedy check decodes the L continuation
    tokens one per step, L forwards: the record's NFE is their sum."""
    lm = DllmLM(pretrained=str(tiny_dirs["llada"]), device="cpu", mc_num=4, batch_size=4, save_dir=str(tmp_path))
    request = Instance("loglikelihood", {}, ("hello", " there"), 0, ("t", 0, 1))
    length = len(lm._encode_pair("hello", " there")[1])
    lm.loglikelihood([request], disable_tqdm=True)
    (record,) = [json.loads(line) for line in (tmp_path / "dllm_requests.rank0.jsonl").read_text().splitlines()]
    assert (record["nfe"], record["scored_tokens"]) == (1 + length, length)


def test_the_greedy_check_decodes_each_continuation_at_its_own_length(tiny_dirs):
    """Continuations of 2 and 4 tokens, each the model's own greedy answer: both are greedy (a
    decode at one length for both would compare a 4-token answer with the 2-token one)."""
    lm = DllmLM(pretrained=str(tiny_dirs["llada"]), device="cpu")
    context = lm.tok_encode("hello")
    answers = [lm.dllm.generate_ids([context], gen_length=n, steps=n, stop_at_eos=False).token_ids[0] for n in (4, 2)]
    assert [g[0] for g in lm._greedy([(context, answers[0]), (context, answers[1])])] == [True, True]


def test_without_max_gen_toks_the_answer_is_model_args_gen_length(tiny_dirs):
    lm = DllmLM(pretrained=str(tiny_dirs["llada"]), device="cpu", gen_length=16, steps=8)
    config, limit = lm.request_config({"until": ["\n"]})
    assert (config.gen_length, config.steps, limit) == (16, 8, 16)


def test_loglikelihood_under_tensor_parallelism_is_refused_before_any_forward(lm, monkeypatch):
    monkeypatch.setattr(lm.options, "tensor_parallel", 2)  # as a torchrun rank of a 2-way copy sees it
    with pytest.raises(ValueError, match="tensor parallelism does not combine"):
        lm.loglikelihood([Instance("loglikelihood", {}, ("hello", " there"), 0, ("t", 0, 1))], disable_tqdm=True)


def test_requests_of_different_lengths_in_one_call_each_decode_as_alone(tiny_dirs, tmp_path):
    """Requests group by the config they decode with: a 16-token request beside an 8-token one
    is not decoded at the other's length (stop_at_eos off: each answer fills its length)."""
    lm = DllmLM(pretrained=str(tiny_dirs["llada"]), device="cpu", batch_size=2, block_length=8, stop_at_eos=False,
                save_dir=str(tmp_path))
    requests = [Instance("generate_until", {}, (p, {"max_gen_toks": n}), 0, ("t", i, 1))
                for i, (p, n) in enumerate([("hello there", 8), ("x y z", 16)])]
    together = lm.generate_until(requests, disable_tqdm=True)
    records = [json.loads(line) for line in (tmp_path / "dllm_requests.rank0.jsonl").read_text().splitlines()]
    assert sorted((r["doc_id"], r["tokens"]) for r in records) == [(0, 8), (1, 16)]
    alone = DllmLM(pretrained=str(tiny_dirs["llada"]), device="cpu", block_length=8, stop_at_eos=False)
    assert together == [alone.generate_until([r], disable_tqdm=True)[0] for r in requests]


def test_add_bos_token_without_a_bos_token_is_refused(tiny_dirs):
    lm = DllmLM(pretrained=str(tiny_dirs["llada"]), device="cpu", add_bos_token=True)
    bos = lm.tokenizer.bos_token
    lm.tokenizer.bos_token = None  # this model's own tokenizer, loaded for it alone
    try:
        assert lm.tokenizer.bos_token_id is None  # the arrangement: a tokenizer without one
        with pytest.raises(ValueError, match="add_bos_token=true, but the tokenizer .* has no bos token"):
            lm.encode_context("hello")
    finally:
        lm.tokenizer.bos_token = bos
