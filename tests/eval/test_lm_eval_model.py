"""The lm-eval model on tiny checkpoints: batches equal single requests, a task's token limit
and stop strings hold, the likelihood is the estimator's, and a rerun answers from its records."""
from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("lm_eval")
from lm_eval.api.instance import Instance  # noqa: E402

import dllm  # noqa: E402
from dllm.eval.likelihood import mc_loglikelihood  # noqa: E402
from dllm.eval.lm_eval import DllmLM  # noqa: E402

PROMPTS = ["a", "hello there, how are you", "x y z", "the quick brown fox jumps over the lazy dog again"]


def _gen(context: str, doc_id: int, **gen_kwargs) -> Instance:
    return Instance("generate_until", {}, (context, {"max_gen_toks": 16, **gen_kwargs}), 0, ("t", doc_id, 1))


def _ll(context: str, continuation: str, doc_id: int) -> Instance:
    return Instance("loglikelihood", {}, (context, continuation), 0, ("t", doc_id, 1))


def _lm(path, **args) -> DllmLM:
    return DllmLM(pretrained=str(path), device="cpu", **args)


def test_ragged_batches_give_the_tokens_of_single_requests(tiny_dirs):
    args = {"policy": "threshold", "tau": 0.5, "cache": "dual", "block_length": 8}
    requests = [_gen(p, i) for i, p in enumerate(PROMPTS)]
    batched = _lm(tiny_dirs["llada"], batch_size=3, **args).generate_until(requests, disable_tqdm=True)
    single = _lm(tiny_dirs["llada"], batch_size=1, **args).generate_until(requests, disable_tqdm=True)
    assert batched == single


def test_max_gen_toks_sets_a_block_aligned_answer_and_until_cuts_it(tiny_dirs):
    lm = _lm(tiny_dirs["llada"], block_length=8, steps=8, gen_length=16, stop_at_eos=False)
    config, limit = lm.request_config({"max_gen_toks": 20})
    assert (config.gen_length, config.block_length, config.steps, limit) == (24, 8, 12, 20)  # 4 steps / block
    unblocked = _lm(tiny_dirs["llada"], gen_length=16, steps=8)
    config, _ = unblocked.request_config({"max_gen_toks": 6})
    assert (config.gen_length, config.block_length, config.steps) == (6, 6, 3)  # 2 tokens per step kept
    (full,) = lm.generate_until([_gen("hello", 0, max_gen_toks=20)], disable_tqdm=True)
    config, _ = lm.request_config({"max_gen_toks": 20})
    answer = lm.dllm.generate_ids([lm.tok_encode("hello")], config).token_ids[0]
    assert len(answer) == 24 and full == lm.tokenizer.decode(answer[:20])  # stop_at_eos off: no end-of-text
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    (cut,) = lm.generate_until([_gen("hello", 0, max_gen_toks=20, until=[stop])], disable_tqdm=True)
    assert cut == full[: full.index(stop)]
    config, _ = lm.request_config({"do_sample": False, "temperature": 0.7})
    assert config.temperature == 0.0
    with pytest.raises(ValueError, match="max_gen_toks"):
        lm.request_config({"max_gen_toks": 0})


def test_a_block_causal_model_gets_whole_steps_per_model_block(tmp_path):
    """Without block_length the answer is one block, which a block-causal model decodes in windows
    inside its blocks (model_block_windows): the step budget is rounded to whole steps per
    window, so any max_gen_toks decodes instead of failing on the step count."""
    from dllm.models.tiny import write_tiny_checkpoint

    lm = _lm(write_tiny_checkpoint(tmp_path / "bd", "fast_dllm_v2", seed=1, block_size=8), gen_length=16, steps=8)
    for max_gen_toks, windows, steps in [(36, 9, 18), (10, 5, 5), (9, 9, 9)]:  # windows of gcd(max, 8)
        config, _ = lm.request_config({"max_gen_toks": max_gen_toks})
        assert (config.gen_length, config.steps) == (max_gen_toks, steps) and steps % windows == 0
    (text,) = lm.generate_until([_gen("hello", 0, max_gen_toks=9)], disable_tqdm=True)
    config = dllm.GenerationConfig(gen_length=9, steps=9, stop_at_eos=False)  # 9 windows of 1, 1 step each
    answer = lm.dllm.generate_ids([lm.tok_encode("hello")], config).token_ids[0]
    assert len(answer) == 9 and text == lm.tokenizer.decode(answer)


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_a_one_token_likelihood_is_the_log_softmax_of_one_forward(tiny_dirs, family):
    """A one-token continuation is masked in every Monte Carlo draw (k = L = 1), so the estimate
    is exactly that token's log-softmax under one forward of context + mask: computed here from
    the model itself, whatever the estimator's draws (Dream reads the output one position left)."""
    lm = _lm(tiny_dirs[family], mc_num=4, batch_size=4, seed=3)
    requests = [_ll("hello", "!", 0), _ll("x y z", ",", 1)]  # one token each in the tiny tokenizer
    expected = []
    for r in requests:
        context, continuation = lm._encode_pair(*r.args)
        assert len(continuation) == 1, continuation  # the arrangement: one token
        x = torch.tensor([context + [lm.model.mask_token_id]])
        with torch.no_grad():
            logits = lm.model(x, torch.arange(x.shape[1])[None])[0].double()
        at = x.shape[1] - 1 - (1 if family == "dream" else 0)
        expected.append(logits[at].log_softmax(-1)[continuation[0]].item())
    results = lm.loglikelihood(requests, disable_tqdm=True)
    assert [value for value, _ in results] == pytest.approx(expected, abs=1e-4)


def test_chat_template_is_the_apis(tiny_dirs):
    lm = _lm(tiny_dirs["llada"])
    messages = [{"role": "user", "content": "reverse [a, b]"}]
    assert lm.tok_encode(lm.apply_chat_template(messages)) == lm.dllm.encode(messages)


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_loglikelihood_is_the_estimate_and_greedy_is_the_models_own_answer(tiny_dirs, family):
    lm = _lm(tiny_dirs[family], mc_num=8, batch_size=4, seed=3)
    (greedy_ids,) = [lm.dllm.generate_ids([lm.tok_encode("hello")], gen_length=4, steps=4,
                                          stop_at_eos=False).token_ids[0]]
    greedy_text = lm.tokenizer.decode(greedy_ids)
    requests = [_ll("hello", greedy_text, 0), _ll("hello there", " you", 1)]
    results = lm.loglikelihood(requests, disable_tqdm=True)
    pairs = [lm._encode_pair(*r.args) for r in requests]
    # the wrapper passes mc_num and seed through (the values themselves: the one-token test above)
    estimates = mc_loglikelihood(lm.model, pairs, mc_num=8, batch_size=4, seed=3)
    assert [r[0] for r in results] == pytest.approx([e.mean for e in estimates], abs=1e-5)
    context = lm.tok_encode("hello")
    other = greedy_ids[:-1] + [greedy_ids[0] if greedy_ids[-1] != greedy_ids[0] else greedy_ids[1]]
    assert [g[0] for g in lm._greedy([(context, greedy_ids), (context, other)])] == [True, False]


def test_unsupported_requests_are_refused_with_the_fix(tiny_dirs):
    lm = _lm(tiny_dirs["llada"], cfg_scale=1.0)
    with pytest.raises(ValueError, match="cfg_scale=0"):
        lm.loglikelihood([_ll("a", " b", 0)])
    with pytest.raises(NotImplementedError, match="perplexity"):
        lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, ("text",), 0, ("t", 0, 1))])
    with pytest.raises(ValueError, match="no CUDA|pass --device cpu"):
        DllmLM(pretrained=str(tiny_dirs["llada"]), device="cuda:0") if not __import__("torch").cuda.is_available() \
            else pytest.skip("CUDA present")
    with pytest.raises(ValueError, match="context of"):
        lm.generate_until([_gen("a " * 5000, 0)])
    # was "prompt 0 is empty; every row needs at least one token", naming no model arg
    with pytest.raises(ValueError, match=r"request 1 \(task t, doc 1\): the context '' encodes to no tokens.*"
                                         r"add_bos_token=true in --model_args"):
        lm.generate_until([_gen("a", 0), _gen("", 1)])


def test_do_sample_samples_as_transformers_does(tiny_dirs):
    """A task asking do_sample without a temperature samples at transformers' default of 1 (it
    decoded greedily: the model args' temperature 0); a temperature from the task or the model
    args is kept, and do_sample false stays greedy."""
    config, _ = _lm(tiny_dirs["llada"]).request_config({"do_sample": True})
    assert config.temperature == 1.0
    config, _ = _lm(tiny_dirs["llada"], temperature=0.7).request_config({"do_sample": True})
    assert config.temperature == 0.7
    config, _ = _lm(tiny_dirs["llada"]).request_config({"do_sample": True, "temperature": 0.2})
    assert config.temperature == 0.2
    config, _ = _lm(tiny_dirs["llada"], temperature=0.7).request_config({"do_sample": False})
    assert config.temperature == 0.0
    # the task's own temperature 0 beside do_sample true is kept, as vLLM reads it (it sampled at 1)
    config, _ = _lm(tiny_dirs["llada"]).request_config({"do_sample": True, "temperature": 0.0})
    assert config.temperature == 0.0


def test_a_context_past_the_model_names_the_tasks_max_gen_toks(tiny_dirs):
    """The task's max_gen_toks set the answer's length, so the fix names it, not gen_length."""
    lm = _lm(tiny_dirs["llada"])
    context = lm.model.config.max_sequence_length
    text = "a " * (context // 4)
    length = len(lm.tok_encode(text))
    asked = context - length + 3
    with pytest.raises(ValueError, match=rf"request 0 \(task t, doc 0\): prompt 0 has {length} tokens \+ max_gen_toks "
                                         rf"{asked} = {context + 3} > .*; shorten the prompt or lower max_gen_toks to "
                                         rf"{context - length}$"):
        lm.generate_until([_gen(text, 0, max_gen_toks=asked)])


def test_a_likelihood_context_past_the_model_is_named_before_any_forward(tiny_dirs, monkeypatch):
    """The length was checked per chunk inside the estimator: request 5 of batches of 2 was
    called "request 1", with no task or doc, after the chunks before it had been computed."""
    import dllm.eval.lm_eval as lm_eval_model

    lm = _lm(tiny_dirs["llada"], batch_size=2, mc_num=2)
    context = lm.model.config.max_sequence_length
    long = "a " * context
    length = len(lm.encode_context(long.rstrip()))
    monkeypatch.setattr(lm_eval_model, "mc_loglikelihood", lambda *a, **k: pytest.fail("a forward ran"))
    requests = [_ll("short", " b", i) for i in range(5)] + [_ll(long, "b", 5)]
    with pytest.raises(ValueError, match=rf"^request 5 \(task t, doc 5\): {length} context \+ \d+ continuation tokens "
                                         rf"exceed the model's context of {context}; shorten the context"):
        lm.loglikelihood(requests, disable_tqdm=True)


def test_a_rerun_answers_from_its_records_and_writes_speed(tiny_dirs, tmp_path, monkeypatch):
    args = {"save_dir": str(tmp_path), "mc_num": 4, "batch_size": 2, "greedy_check": False}
    gen = [_gen(p, i) for i, p in enumerate(PROMPTS)]
    ll = [_ll("hello", " there", 0), _ll("a", " b", 1)]
    first = _lm(tiny_dirs["llada"], **args)
    answers, scores = first.generate_until(gen, disable_tqdm=True), first.loglikelihood(ll, disable_tqdm=True)
    speed = json.loads((tmp_path / "dllm_speed.json").read_text())["rows"]
    gen_row = next(r for r in speed if r["request_type"] == "generate_until")
    assert gen_row["requests"] == 4 and gen_row["nfe"] > 0 and gen_row["tpf"] > 0 and gen_row["tokens_per_s"] > 0
    lines = (tmp_path / "dllm_requests.rank0.jsonl").read_text().splitlines()
    assert len(lines) == 6

    def no_model_work(*a, **k):
        raise AssertionError("a finished request was decoded again")

    again = _lm(tiny_dirs["llada"], **args)
    monkeypatch.setattr(again.dllm, "generate_ids", no_model_work)
    monkeypatch.setattr("dllm.eval.lm_eval.mc_loglikelihood", no_model_work)
    assert again.generate_until(gen, disable_tqdm=True) == answers
    assert again.loglikelihood(ll, disable_tqdm=True) == scores
    assert (tmp_path / "dllm_requests.rank0.jsonl").read_text().splitlines() == lines
    monkeypatch.undo()
    other = _lm(tiny_dirs["llada"], **{**args, "policy": "threshold"})  # another config: decoded anew
    other.generate_until(gen[:1], disable_tqdm=True)
    assert len((tmp_path / "dllm_requests.rank0.jsonl").read_text().splitlines()) == 7


def test_add_bos_token_starts_every_context_once(tiny_dirs):
    lm = _lm(tiny_dirs["dream"], add_bos_token=True)
    bos = lm.tokenizer.bos_token_id
    assert lm.encode_context("hello") == [bos, *lm.tok_encode("hello")]
    assert lm.encode_context(lm.tokenizer.bos_token + "hello") == [bos, *lm.tok_encode("hello")]
    assert lm._encode_pair("hello", " there")[0] == [bos, *lm.tok_encode("hello")]
    assert _lm(tiny_dirs["dream"]).encode_context("hello") == lm.tok_encode("hello")


def test_repeated_requests_sample_anew_and_each_is_a_single_runs_sample(tiny_dirs):
    lm = _lm(tiny_dirs["llada"], temperature=1.0, batch_size=4)
    request = _gen("hello", 0)
    first, second, other = lm.generate_until([request, request, _gen("x y z", 1)], disable_tqdm=True)
    assert first != second  # the second copy samples with the next seed
    assert lm.generate_until([request], disable_tqdm=True) == [first]
    alone = _lm(tiny_dirs["llada"], temperature=1.0, seed=1).generate_until([request], disable_tqdm=True)
    assert alone == [second]


def test_prepack_loads_the_prepacked_model_and_batches_as_single_requests(tiny_dirs):
    from dllm.models.prepack import PrepackedLinear, prepack_refused

    if prepack_refused():
        pytest.skip(prepack_refused())
    args = {"policy": "threshold", "tau": 0.5, "cache": "dual", "block_length": 8, "prepack": True}
    requests = [_gen(p, i) for i, p in enumerate(PROMPTS)]
    batched = _lm(tiny_dirs["llada"], batch_size=3, **args)
    assert isinstance(batched.model.lm_head, PrepackedLinear)
    single = _lm(tiny_dirs["llada"], batch_size=1, **args).generate_until(requests, disable_tqdm=True)
    assert batched.generate_until(requests, disable_tqdm=True) == single


@pytest.mark.parametrize("family", ["sdar", "llada2_moe", "llada_moe"])
def test_new_families_take_lm_eval_unchanged(tmp_path, family):
    """The lm-eval model loads each new family by path and answers generate_until requests with
    the API's tokens, ragged batches equal to single requests."""
    from dllm.models.tiny import write_tiny_checkpoint

    path = write_tiny_checkpoint(tmp_path / family, family, seed=4)
    block = 32 if family == "llada2_moe" else 8
    args = {"policy": "threshold", "tau": 0.5, "cache": "dual", "block_length": block}
    requests = [_gen(p, i, max_gen_toks=block) for i, p in enumerate(PROMPTS)]
    batched = _lm(path, batch_size=3, **args).generate_until(requests, disable_tqdm=True)
    single = _lm(path, batch_size=1, **args).generate_until(requests, disable_tqdm=True)
    assert batched == single


def test_adapter_model_arg_merges_the_lora_adapter(tiny_dirs, tmp_path):
    """adapter=DIR loads as dllm.load(base, adapter=DIR): the merged weights, and its own records."""
    from tests.models.test_adapters import read_checkpoint, write_adapter

    write_adapter(tmp_path / "lora", read_checkpoint(tiny_dirs["llada"]), ["q_proj", "v_proj"])
    lm = _lm(tiny_dirs["llada"], adapter=str(tmp_path / "lora"))
    want = dllm.load(tiny_dirs["llada"], device="cpu", dtype="float32", adapter=tmp_path / "lora")
    got, ref = lm.model.state_dict(), want.model.state_dict()
    assert all(torch.equal(got[k], ref[k]) for k in ref)
    plain = _lm(tiny_dirs["llada"])
    assert not torch.equal(plain.model.state_dict()["layers.0.attn.q_proj.weight"], got["layers.0.attn.q_proj.weight"])
    assert lm.records.fingerprint != plain.records.fingerprint


def test_simple_evaluate_by_name_answers_as_the_python_api(tiny_dirs, monkeypatch, tmp_path):
    """lm-eval's Python entry with the registered name (importing dllm.eval.lm_eval registers it)
    and a local task: each logged answer is generate's text for the context at the task's
    max_gen_toks, cut at its until string."""
    from pathlib import Path

    import lm_eval
    from lm_eval.tasks import TaskManager

    import datasets

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")  # the task's JSON, not the user's cache
    tasks = TaskManager(include_path=str(Path(__file__).resolve().parent / "tasks"))
    out = lm_eval.simple_evaluate(model="dllm", model_args={"pretrained": str(tiny_dirs["llada"]), "device": "cpu"},
                                  tasks=["dllm_reverse_gen"], task_manager=tasks, limit=3, batch_size=2,
                                  log_samples=True)
    samples = out["samples"]["dllm_reverse_gen"]
    model = dllm.load(tiny_dirs["llada"], device="cpu")
    assert len(samples) == 3
    answers = []
    for sample in samples:
        ((context, gen_kwargs),) = sample["arguments"]
        assert (gen_kwargs["max_gen_toks"], gen_kwargs["until"]) == (32, ["\n"])  # the task's
        answers.append(model.generate(context, chat=False, max_tokens=32).texts[0].split("\n")[0])
        assert sample["resps"] == [[answers[-1]]]
    assert any(answers)  # text to compare, not three empty answers
