"""Tensor and expert parallelism under torchrun (gloo, CPU): the same tokens and logits as one
process (every cache, top-k / top-p sampling, logprobs, the answer-wide stoppers, DiffusionGemma's
uniform-state decode), sizes that do not fit refused before loading, a failing rank ends the job.

One torchrun job at 2 ranks runs every decode and logits case (``tp_worker.py``), one at 4
ranks the logits cases whose sizes divide by 4; one process computes the references here."""
from __future__ import annotations

import functools
import json
import re
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import dllm
from dllm import GenerationConfig
from dllm.engine.decoding import _filter_logits
from dllm.engine.memory import plan_memory
from dllm.engine.uniform_state import uniform_state_config
from dllm.kernels.confidence_stats import confidence_stats_torch
from dllm.kernels.shard_stats import combine_shard_stats_torch, shard_stats_torch
from dllm.models.loading import read_config
from dllm.models.tiny import write_tiny_checkpoint
from dllm.parallel.tensor_plan import TensorPlanError, check_plan
from dllm.parallel.vocab_shard import _key_floats, _order_keys, filter_shard_logits, shard_logprobs
from tests.once_per_run import once_per_run
from tests.parallel.tp_worker import decode_logprobs, denoise_logits
from torchrun_helpers import torchrun

WORKER = Path(__file__).with_name("tp_worker.py")
BUNDLED = ["dllm-waitingline-llada", "dllm-waitingline-dream", "dllm-waitingline-bd"]
PROMPTS = ["copy the list [a, b, c]", "sort these names: bob, al, cy"]
GEN = dict(gen_length=16, block_length=8, steps=16, stop_at_eos=False)
LIST_OF_NAMES = {"type": "array", "items": {"type": "string"}}
NAMES_REGEX = r"[a-z]+(, [a-z]+)*"
DECODES = [(name, {"cache": cache}) for name in BUNDLED for cache in ("none", "prefix", "dual")]
DECODES += [("dllm-waitingline-llada", {"temperature": 0.8, "seed": 7}),
            ("dllm-waitingline-bd", {"temperature": 0.8, "seed": 7, "cache": "dual"}),
            ("dllm-waitingline-llada", {"policy": "threshold", "strategy": "freedave", "cache": "dual"}),
            ("dllm-waitingline-bd", {"policy": "threshold", "strategy": "lopa", "cache": "prefix"}),
            # the adaptive cache: its read refresh (default), and the window choice's refreshes on drift from layer 0
            ("dllm-waitingline-llada", {"cache": "adaptive"}),
            ("dllm-waitingline-dream", {"cache": "adaptive", "cache_args": {"select": "window", "drift": 0.02,
                                                                "scope": "all", "ratio": 0.5, "from_layer": 0}}),
            # top-k / nucleus filtering of sampled tokens, found from small exchanges
            ("dllm-waitingline-llada", {"temperature": 0.8, "seed": 3, "top_k": 3}),
            ("dllm-waitingline-llada", {"temperature": 0.8, "seed": 3, "top_p": 0.5}),
            ("dllm-waitingline-dream", {"temperature": 1.5, "seed": 3, "top_k": 20, "top_p": 0.8, "cache": "dual"}),
            # answer-wide stoppers (whole-answer statistics from the shards), each exiting early
            ("dllm-waitingline-llada", {"stopper": "sched"}),
            ("dllm-waitingline-dream", {"stopper": "prophet", "cache": "dual"}),
            ("dllm-waitingline-llada", {"stopper": "eotp", "policy": "threshold", "policy_args": {"tau": 0.9},
                                        "stop_at_eos": True, "cache": "dual"}),
            ("dllm-waitingline-dream", {"stopper": "prophet", "cache": "adaptive"}),
            # structured output: every rank decides the canvas question and masks its vocabulary shard
            ("dllm-waitingline-llada", {"cache": "dual", "structured": {"json_schema": LIST_OF_NAMES}}),
            ("dllm-waitingline-dream", {"temperature": 0.8, "seed": 7, "structured": {"regex": NAMES_REGEX}})]
# (the Dream model's saturated confidences tie to an ulp at some steps, so low-confidence order
# could follow the forward's rounding there; left to right, each token's forward is fixed)
LOGPROBS = [("dllm-waitingline-llada", {"cache": "dual", "temperature": 0.8, "seed": 5}),
            ("dllm-waitingline-dream", {"cache": "prefix", "policy": "sequential"})]
# tiny random checkpoints: K/V heads fewer than 4 ranks (replicated), fused q/k/v, experts
TINY = [("llada", {}), ("dream", {"n_kv_heads": 2}), ("llada2_moe", {"n_kv_heads": 1}), ("llada_moe", {}),
        ("sdar", {"n_kv_heads": 2})]
# DiffusionGemma's default decode (strategy uniform, cache encoder: canvases of 8) on a ragged batch
GEMMA_PROMPTS = ["copy the list [a, b, c]", "sort", "reverse: x y z w v"]
GEMMA_GEN = dict(gen_length=16, block_length=8, steps=8, stop_at_eos=False)


def _torchrun(args, nproc, env=None, timeout=240):
    return torchrun(args, nproc, env, timeout)


def _write_tiny(root: Path) -> None:
    for i, (family, kw) in enumerate(TINY):
        write_tiny_checkpoint(root / family, family, seed=10 + i, **kw)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = once_per_run(tmp_path_factory, "tp-tiny", _write_tiny)  # one copy: the tp2 job's spec names it
    g = torch.Generator().manual_seed(0)
    return {family: (root / family, torch.randint(0, 300, (2, 12), generator=g)) for family, _ in TINY}


def _spec_logits(tiny):
    return [{"model": str(p), "kind": "logits", "ids": ids.tolist()} for p, ids in tiny.values()]


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    """A tiny DiffusionGemma (4 heads; a sliding layer of 2 K/V heads, a full one of 1 of twice the
    head size; 4 experts), a prefix and a canvas for its denoiser."""
    root = once_per_run(tmp_path_factory, "tp-gemma",
                        lambda root: write_tiny_checkpoint(root / "gemma", "diffusion_gemma", seed=3))
    path = root / "gemma"
    g = torch.Generator().manual_seed(2)
    return path, torch.randint(6, 250, (2, 11), generator=g), torch.randint(6, 250, (2, 8), generator=g)


def _spec_gemma(gemma, *, decode: bool = True) -> list[dict]:
    path, ids, canvas = gemma
    spec = [{"model": str(path), "kind": "denoise", "ids": ids.tolist(), "canvas": canvas.tolist(), "gemma": True}]
    if decode:
        spec.append({"model": str(path), "kind": "generate", "prompts": GEMMA_PROMPTS, "config": GEMMA_GEN,
                     "gemma": True})
    return spec


def _gemma_case(tp2, kind: str) -> tuple[dict, dict]:
    spec, out = tp2
    i = next(i for i, case in enumerate(spec) if case.get("gemma") and case["kind"] == kind)
    return spec[i], out[i]


@pytest.fixture(scope="module")
def tp2(tiny, gemma, tmp_path_factory):
    """(spec, outputs) of the 2-rank job, run once however many workers run this file's tests."""
    spec = [{"model": name, "kind": "generate", "prompts": PROMPTS, "config": _config(opt),
             "structured": opt.get("structured", {})} for name, opt in DECODES]
    spec += [{"model": str(tiny["llada2_moe"][0]), "kind": "generate", "prompts": PROMPTS,
              "config": {**GEN, "cache": "prefix"}}]
    spec += _spec_logits(tiny) + _spec_gemma(gemma)
    spec += [{"model": name, "kind": "logprobs", "prompts": PROMPTS, "top": 3, "config": {**GEN, **opt}}
             for name, opt in LOGPROBS]

    def run(root: Path) -> None:
        (root / "spec.json").write_text(json.dumps(spec))
        done = _torchrun([str(WORKER), str(root / "spec.json"), str(root / "out.json")], 2)
        assert done.returncode == 0, done.stderr[-3000:]

    root = once_per_run(tmp_path_factory, "tp2", run)
    assert json.loads((root / "spec.json").read_text()) == json.loads(json.dumps(spec))  # the job this worker asks for
    return spec, json.loads((root / "out.json").read_text())


def _config(options: dict) -> dict:
    """A case's GenerationConfig options (its constraint, if any, goes to generate beside them)."""
    return {**GEN, **{k: v for k, v in options.items() if k != "structured"}}


@functools.lru_cache(maxsize=None)
def _loaded(path: str):
    return dllm.load(path, device="cpu", dtype="float32")


def _one_process(case):
    model = _loaded(case["model"])
    if case["kind"] == "logits":
        ids = torch.tensor(case["ids"])
        with torch.no_grad():
            return model.model(ids, torch.arange(ids.shape[1])[None].expand_as(ids))
    if case["kind"] == "logprobs":
        return decode_logprobs(model, case["prompts"], GenerationConfig(**case["config"]), case["top"])
    if case["kind"] == "denoise":
        return denoise_logits(model.model, torch.tensor(case["ids"]), torch.tensor(case["canvas"]))
    return model.generate(case["prompts"], GenerationConfig(**case["config"]), **case.get("structured", {}))


@pytest.mark.parametrize("i", range(len(DECODES) + 1),
                         ids=[f"{n}-{'-'.join(f'{k}={v}' for k, v in o.items())}" for n, o in DECODES] + ["tiny-moe"])
def test_tp2_decodes_the_tokens_of_one_process(tp2, i):
    spec, out = tp2
    single = _one_process(spec[i])
    assert out[i]["token_ids"] == single.token_ids
    structured = spec[i].get("structured", {})
    if structured.get("json_schema"):  # the constraint held: every answer a JSON list of strings
        assert all(isinstance(json.loads(text), list) for text in single.texts), single.texts
    if structured.get("regex"):
        assert all(re.fullmatch(NAMES_REGEX, text) for text in single.texts), single.texts
    assert out[i]["nfe"] == [s["nfe"] for s in single.stats]  # early exits and truncations too
    assert any(len(set(ids)) > 2 for ids in out[i]["token_ids"])  # answers, not one repeated token
    reduced, gathered, _, gathers = out[i]["comm"]
    assert reduced > 0 and gathers > 0  # partial statistics exchanged, ...
    n_pos = sum(8 for _ in spec[i]["prompts"])  # ... 32 bytes a row, never a logits row
    states = 8 if spec[i]["config"].get("strategy") else 1  # FreeDave / LoPA: candidate rows
    assert gathered / gathers <= 32 * n_pos * 3 * states
    whole = plan_memory(_loaded(spec[i]["model"]).model, len(spec[i]["prompts"]), 64,
                        GenerationConfig(**spec[i]["config"])).as_dict()
    rank = out[i]["plan"]  # the memory plan is per rank: its weights and its vocabulary shard
    assert rank["model_bytes"] < 0.6 * whole["model_bytes"]
    assert rank["logits_bytes"] * 2 == whole["logits_bytes"]


def test_tp2_logits_of_every_family_match_one_process(tp2, tiny):
    spec, out = tp2
    logits = slice(len(DECODES) + 1, len(DECODES) + 1 + len(tiny))
    for case, got in zip(spec[logits], out[logits]):
        ref = _one_process(case)
        assert torch.allclose(torch.tensor(got["logits"]), ref, atol=1e-4, rtol=1e-4), case["model"]
        # one all-reduce of (B, T, d_model) float32 for the embedding, and two a layer (attention
        # and MLP or MoE; 2 layers, d_model 64): the count docs/SCALING.md's formula uses
        B, T = ref.shape[:2]
        assert got["forward_comm"] == [(1 + 2 * 2) * B * T * 64 * 4, 1 + 2 * 2]
        whole = sum(t.numel() for t in _loaded(case["model"]).model.state_dict().values())
        assert got["params"] < 0.6 * whole  # no rank holds the whole model


def test_tp2_diffusion_gemma_decodes_the_tokens_of_one_process(tp2):
    """DiffusionGemma split by heads, dense hidden units and experts, its vocabulary whole: a
    ragged batch's default decode gives one process's tokens and forwards with no statistics
    exchange (every rank has whole logit rows), and the rank's memory plan counts its K/V heads
    (the sliding layer's 2 split, the full layer's 1 replicated) and whole logits."""
    case, got = _gemma_case(tp2, "generate")
    single = _one_process(case)
    assert got["token_ids"] == single.token_ids
    assert got["nfe"] == [s["nfe"] for s in single.stats]
    assert any(len(set(ids)) > 2 for ids in got["token_ids"])
    reduced, gathered, reduces, gathers = got["comm"]
    assert reduced > 0 and reduces > 0 and gathered == gathers == 0
    cfg = read_config(Path(case["model"]))[1]
    B, item = len(case["prompts"]), 4  # float32
    kv = {i: cfg.layer_heads(i) for i in range(cfg.n_layers)}
    assert sorted(kv.values()) == [(16, 2), (32, 1)]
    expected = sum(2 * B * (n_kv // 2 if n_kv >= 2 else 1) * 64 * dim * item for dim, n_kv in kv.values())
    model = _loaded(case["model"]).model  # the plan of the decode it runs: cache "encoder"
    whole = plan_memory(model, B, 64, uniform_state_config(model, GenerationConfig(**case["config"]))).as_dict()
    assert got["plan"]["kv_cache_bytes"] == expected < whole["kv_cache_bytes"]
    assert got["plan"]["logits_bytes"] == whole["logits_bytes"]  # the vocabulary is not split
    assert got["plan"]["model_bytes"] < whole["model_bytes"]


def test_tp2_diffusion_gemma_denoiser_logits_match_one_process(tp2):
    """The encoder's K/V (the rank's heads) and the denoiser, alone and self-conditioned: one
    process's logits to float rounding; an all-reduce after attention, the dense MLP and the
    experts of each layer, none for the (whole) embedding."""
    case, got = _gemma_case(tp2, "denoise")
    ref = _one_process(case)
    assert torch.allclose(torch.tensor(got["logits"]), ref, atol=1e-4, rtol=1e-4)
    (B, T), C = torch.tensor(case["ids"]).shape, len(case["canvas"][0])
    positions = B * T + 2 * B * C  # the prefix once, the canvas twice
    assert got["forward_comm"] == [3 * 2 * positions * 64 * 4, 3 * 2 * 3]  # 2 layers, d_model 64, float32
    whole = sum(t.numel() for t in _loaded(case["model"]).model.state_dict().values())
    assert got["params"] < 0.8 * whole


def test_the_answer_wide_stoppers_exit_early_under_tp2(tp2):
    """The stopper cases really stop or truncate before the step budget (16 forwards a row)."""
    spec, out = tp2
    for case, got in zip(spec[: len(DECODES)], out[: len(DECODES)]):
        if case["config"].get("stopper"):
            assert min(got["nfe"]) < GEN["steps"], case["config"]


@pytest.mark.parametrize("i", range(len(LOGPROBS)), ids=[f"{n}-{o}" for n, o in LOGPROBS])
def test_tp2_logprobs_are_those_of_one_process(tp2, i):
    """Each committed token's logprob and its top-3 alternatives from shard partials (log-sum-exp
    combine, top-n gather): one process's tokens and ids, its values as closely as the sharded
    forward's logits match (1e-4)."""
    spec, out = tp2
    at = len(spec) - len(LOGPROBS) + i
    got, single = out[at], _one_process(spec[at])
    assert got["token_ids"] == single["token_ids"]
    assert got["order"] == single["order"]  # each token committed by the same forward
    assert got["top_ids"] == single["top_ids"]
    for name in ("logprob", "top_logprob"):
        a, b = torch.tensor(got[name]), torch.tensor(single[name])
        assert torch.equal(a.isnan(), b.isnan()) and not a.isnan().all(), name
        assert torch.allclose(a.nan_to_num(), b.nan_to_num(), atol=1e-4, rtol=1e-4), name


def test_tp4_logits_match_one_process(tiny, gemma, tmp_path):
    """4 ranks: 1 or 2 K/V heads replicated, one expert a rank (DiffusionGemma: one query head a
    rank, both layers' K/V heads replicated)."""
    spec = _spec_logits(tiny) + _spec_gemma(gemma, decode=False)
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    done = _torchrun([str(WORKER), str(tmp_path / "spec.json"), str(tmp_path / "out.json")], 4)
    assert done.returncode == 0, done.stderr[-3000:]
    for case, got in zip(spec, json.loads((tmp_path / "out.json").read_text())):
        assert torch.allclose(torch.tensor(got["logits"]), _one_process(case), atol=1e-4, rtol=1e-4), case["model"]


@pytest.mark.parametrize("temperature", [0.0, 0.9])
@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_shard_statistics_combine_to_the_whole_vocabulary(size, temperature):
    torch.manual_seed(0)
    R, V = 33, 96
    x = torch.randn(R, V) * 3
    x[0, 5] = x[0, 70] = 50.0  # the max tied across shards: the lower id wins
    x[1] = float("-inf")
    x[1, 3] = 1.0  # a single finite entry: no second
    excluded = torch.tensor([7, 60])
    ref = confidence_stats_torch(x, temperature=temperature, seed=123, offset=5, excluded_ids=excluded)
    n = V // size
    top = x.index_fill(1, excluded, float("-inf")).amax(-1)
    parts = torch.stack([shard_stats_torch(x[:, r * n:(r + 1) * n], vocab_start=r * n, temperature=temperature,
                                           seed=123, offset=5, excluded_ids=excluded, global_max=top)
                         for r in range(size)])
    got = combine_shard_stats_torch(parts)
    assert torch.equal(got.token, ref.token)
    for name, a, b in zip(ref._fields[1:], got[1:], ref[1:]):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), name


class _ThreadShard:
    """A TensorShard stand-in for one rank of ``size`` threads: its collectives meet the others'."""

    def __init__(self, rank: int, size: int, slots: list, barrier: threading.Barrier) -> None:
        self.rank, self.size, self._slots, self._barrier = rank, size, slots, barrier

    def _meet(self, x):
        self._slots[self.rank] = x.clone()
        self._barrier.wait()
        parts = list(self._slots)
        self._barrier.wait()
        return parts

    def all_reduce(self, x, op=None):
        parts = self._meet(x)
        return x.copy_(torch.stack(parts).amax(0) if op == dist.ReduceOp.MAX else torch.stack(parts).sum(0))

    def all_gather(self, x):
        return torch.stack(self._meet(x))


def _on_ranks(size, fn):
    """fn(shard) on ``size`` threads, one rank each; their results in rank order."""
    slots, barrier, out, errors = [None] * size, threading.Barrier(size), [None] * size, []

    def body(rank):
        try:
            out[rank] = fn(_ThreadShard(rank, size, slots, barrier))
        except Exception as err:  # noqa: BLE001  re-raised below
            errors.append(err)
            barrier.abort()

    threads = [threading.Thread(target=body, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_shard_filtering_keeps_exactly_what_one_process_keeps(size):
    """top-k from the ranks' own k best; the nucleus from the threshold search: the same kept set
    as one process's _filter_logits, ties (lowest id first) and -inf entries included."""
    g = torch.Generator().manual_seed(size)
    R, V = 9, 96
    n = V // size
    for trial in range(24):
        x = torch.randn(R, V, generator=g) * [0.05, 1.0, 4.0, 20.0][trial % 4]
        if trial % 3 == 0:
            x = (x * 2).round() / 2  # many ties, across shards
        x[0, 3] = float("-inf")
        for k, p in [(None, 0.9), (5, None), (10, 0.5), (None, 0.2), (50, 0.95), (None, 0.999)]:
            ref = _filter_logits(x, k, p)
            got = torch.cat(_on_ranks(size, lambda tp: filter_shard_logits(tp, x[:, tp.rank * n:(tp.rank + 1) * n],
                                                                           k, p)), dim=-1)
            assert torch.equal(got, ref), (trial, k, p)


def test_nucleus_search_keys_order_floats_and_invert():
    """The nucleus search walks float32 bit patterns as ordered integer keys: keys rise with the
    values (-0.0 just below +0.0, subnormals and infinities in place) and map back to the same
    bits, so the threshold it ends on is a value of the row, exactly."""
    tiny = torch.finfo(torch.float32).tiny
    x = torch.tensor([float("-inf"), -3.5, -1.0, -tiny, -tiny / 4, -0.0, 0.0, tiny / 4, tiny, 1.0, 3.5, float("inf")])
    keys = _order_keys(x)
    assert bool((keys[1:] > keys[:-1]).all())
    assert torch.equal(_key_floats(keys).view(torch.int32), x.view(torch.int32))


@pytest.mark.parametrize("size", [1, 2, 4])
def test_shard_logprobs_are_the_whole_rows(size):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 96, generator=g) * 3
    x[0, 10] = x[0, 80] = 30.0  # a tie across shards: the lower id first
    token = torch.tensor([80, 5, 95, 48, 0, 47])
    n = 96 // size
    chosen, values, ids = _on_ranks(size, lambda tp: shard_logprobs(tp, x[:, tp.rank * n:(tp.rank + 1) * n],
                                                                    token, 4))[0]
    logp = x.log_softmax(-1)
    assert torch.allclose(chosen, logp.gather(1, token[:, None])[:, 0], atol=1e-5)
    ref_values, ref_ids = logp.topk(4)
    assert torch.allclose(values, ref_values, atol=1e-5)
    assert torch.equal(ids[1:], ref_ids[1:]) and ids[0, :2].tolist() == [10, 80]


def test_sizes_that_do_not_divide_are_refused_before_loading(tiny, monkeypatch):
    import dllm.api.model

    def no_read(*_a, **_k):
        raise AssertionError("weights were read")

    monkeypatch.setattr(dllm.api.model, "load_model", no_read)
    with pytest.raises(TensorPlanError, match="does not divide .*vocabulary of 1286"):
        dllm.load("dllm-waitingline-llada", tensor_parallel=4)
    with pytest.raises(TensorPlanError) as err:
        dllm.load(tiny["llada2_moe"][0], tensor_parallel=3)
    for named in ("4 attention heads", "MLP hidden size 128", "4 experts", "shared-expert hidden size 32"):
        assert named in str(err.value)
    assert "K/V" not in str(err.value)  # its one K/V head is replicated on 3 ranks
    cfg = read_config(tiny["dream"][0])[1]  # 2 K/V heads: 3 neither divides nor replicates them
    with pytest.raises(TensorPlanError, match="2 K/V heads .*MLP hidden size 128"):
        check_plan(cfg, 3)
    check_plan(cfg, 4)
    with pytest.raises(TensorPlanError, match="needs 2 processes: launch it with torchrun --nproc_per_node 2"):
        dllm.load("dllm-waitingline-llada", tensor_parallel=2)


CLI = ["-m", "dllm", "generate", "--model", "dllm-waitingline-llada", "--device", "cpu", "--json",
       "--gen-length", "16", "--block-length", "8", "--steps", "16", "--no-stop-at-eos", *PROMPTS]


def test_generate_command_with_tensor_parallel_prints_one_process_answers():
    done = _torchrun([*CLI, "--tensor-parallel", "2"], 2)
    assert done.returncode == 0, done.stderr[-3000:]
    texts = [json.loads(line)["text"] for line in done.stdout.splitlines()]  # rank 0's lines only
    single = _loaded("dllm-waitingline-llada").generate(PROMPTS, GenerationConfig(**GEN))
    assert texts == single.texts


def test_generate_command_splits_diffusion_gemma_and_prints_one_process_answers():
    """The bundled DiffusionGemma-layout model's default decode (uniform, encoder) over 2 ranks."""
    gen = dict(gen_length=32, block_length=32, steps=8)
    done = _torchrun([*CLI[:3], "--model", "dllm-waitingline-gemma", "--device", "cpu", "--json", "--gen-length", "32",
                      "--block-length", "32", "--steps", "8", "--tensor-parallel", "2", *PROMPTS], 2)
    assert done.returncode == 0, done.stderr[-3000:]
    texts = [json.loads(line)["text"] for line in done.stdout.splitlines()]
    assert texts == _loaded("dllm-waitingline-gemma").generate(PROMPTS, GenerationConfig(**gen)).texts


def test_a_failing_rank_ends_the_job_with_its_message():
    start = time.monotonic()
    done = _torchrun([*CLI, "--tensor-parallel", "2"], 2, env={"DLLM_FAIL_RANK": "1"}, timeout=120)
    assert done.returncode != 0
    assert "rank 1 failed: injected failure on rank 1" in done.stderr
    assert time.monotonic() - start < 60
