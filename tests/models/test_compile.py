"""``GenerationConfig(compile=True)``: the compiled forward gives the tokens, order and NFE of
the eager one for every cache mode (refresh and window forwards, in-place K/V writes, sub-blocks,
the pipelined mode's append cache), every family (bidirectional, block-causal, MoE), candidate
batches and a ragged batch, as whole graphs (no graph break, no fallback past the recompile
limit). Uses the ``aot_eager`` backend (graph capture and functionalisation without code
generation, which takes minutes on a small CPU); ``DLLM_TEST_COMPILE_BACKEND=inductor`` repeats it
with code generation, on CUDA in ``mode="reduce-overhead"`` (the GPU check's default test stage does
not set it: its minutes of compiling would spend the stage's budget; set it with ``--pytest-args
tests/models/test_compile.py``)."""
from __future__ import annotations

import json
import os
import warnings

import pytest
import torch
from torch._dynamo.utils import counters

import dllm
from dllm import GenerationConfig
from dllm.runner.compiled import compile_available
from dllm.engine.decoding import decode
from dllm.models.tiny import write_tiny_checkpoint

REASON = compile_available()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"torch.compile unavailable: {REASON}")
PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11]]  # ragged: the first row is left-padded
BASE = dict(gen_length=16, block_length=8, steps=8, policy="threshold", policy_args={"tau": 0.09})
# per family, the decodes one test compiles in a row (graphs of equal shapes are shared between them)
CASES = {
    "llada": {"none": dict(cache="none"), "prefix": dict(cache="prefix"), "dual": dict(cache="dual"),
              "dual-lopa": dict(cache="dual", strategy="lopa"), "dual-sub-blocks": dict(cache="dual", sub_block_length=4),
              "adaptive": dict(cache="adaptive")},  # its own layer loop runs eagerly (dllm/runner/compiled.py)
    "dream": {"prefix-sub-blocks": dict(cache="prefix", sub_block_length=4), "dual": dict(cache="dual")},
    "fast_dllm_v2": {"dual": dict(cache="dual")},  # block-causal: refresh from the exact end, then the block
    "llada2_moe": {"dual": dict(cache="dual")},
    "d2f": {"append": dict(gen_length=8, block_length=4, policy="low_confidence", policy_args={"tau": 0.9}, steps=None,
                           block_add_threshold=0.1, decoded_token_threshold=0.5, cache="dual")},
}


@pytest.fixture(autouse=True)
def backend(monkeypatch):
    monkeypatch.setenv("DLLM_COMPILE_BACKEND", os.environ.get("DLLM_TEST_COMPILE_BACKEND", "aot_eager"))
    # past the recompile limit dynamo would run the forward eagerly: the tests would compare eager with eager
    torch._dynamo.reset()
    counters.clear()
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        yield
    torch._dynamo.reset()


@pytest.fixture(scope="module")
def models(tiny_models, tmp_path_factory):
    """The loaded model of each family in CASES (float32, the test device)."""
    root, device = tmp_path_factory.mktemp("compile"), tiny_models["llada"].model.device
    out = {name: tiny_models[name].model for name in ("llada", "dream")}
    for family in ("fast_dllm_v2", "llada2_moe"):
        out[family] = dllm.load(write_tiny_checkpoint(root / family, family, seed=11), device=device,
                                dtype="float32").model
    path = write_tiny_checkpoint(root / "d2f", "llada", seed=11)  # a D2F student: the pipelined mode
    config = json.loads((path / "config.json").read_text())
    config.update(dllm_attention="block_causal", dllm_block_size=4)
    (path / "config.json").write_text(json.dumps(config))
    out["d2f"] = dllm.load(path, device=device, dtype="float32").model
    return out


@pytest.mark.parametrize("family", CASES)
def test_compiled_decode_equals_eager(models, family):
    model = models[family]
    for name, options in CASES[family].items():
        config = {**BASE, **options}
        eager = decode(model, PROMPTS, GenerationConfig(**config))
        compiled = decode(model, PROMPTS, GenerationConfig(**config, compile=True))
        assert torch.equal(eager.answer, compiled.answer), name
        assert torch.equal(eager.order, compiled.order) and torch.equal(eager.nfe, compiled.nfe), name
    assert counters["stats"]["unique_graphs"] > 0  # the forwards ran compiled ...
    assert not counters["graph_break"], dict(counters["graph_break"])  # ... each one whole graph


def test_mark_static_marks_each_buffer_once(monkeypatch):
    """Issue 38: the marked-buffer bookkeeping was a WeakSet, whose membership test compares
    tensors with ``==`` (elementwise): the second forward of every cached decode on CUDA raised.
    Run here on CPU tensors of several elements; equal-valued buffers stay distinct."""
    from dllm.cache.kv import KVBuffers
    from dllm.runner import compiled

    marked = []
    monkeypatch.setattr(torch._dynamo, "mark_static_address", lambda t, guard=False: marked.append(id(t)))
    kv = KVBuffers([(torch.zeros(2, 2, 4, 3), torch.zeros(2, 2, 4, 3)) for _ in range(2)])
    copy = kv.select(torch.tensor([1, 1, 0]))  # a candidate batch's copy: new buffers
    for cache in (kv, kv, copy, kv, copy):
        compiled.mark_static(cache, devices=("cpu",))
    assert marked == [id(t) for cache in (kv, copy) for pair in cache.layers for t in pair]
    compiled.mark_static(KVBuffers([(torch.zeros(3), torch.zeros(3))]))  # CPU buffers: not CUDA's concern
    assert len(marked) == 8


def test_compile_is_off_by_default():
    assert GenerationConfig().compile is False


@pytest.mark.parametrize("cache", ["dual", "none"])
def test_forward_timer_times_compiled_forwards(tiny_models, cache):
    """The GPU check's ForwardTimer sees every forward of a compiled decode, as of an eager one
    (its hooks used to be traced into the compiled graph: on CUDA the events were never recorded)."""
    from dllm.bench.forward_timer import ForwardTimer

    model = tiny_models["llada"].model
    config = dict(gen_length=16, block_length=8, steps=8, policy="threshold", policy_args={"tau": 0.09}, cache=cache)
    shapes = {}
    for compile_ in (False, True):
        with ForwardTimer(model) as timer, warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            decode(model, PROMPTS, GenerationConfig(**config, compile=compile_))
        assert not [w for w in seen if "perf_counter" in str(w.message)]  # the hooks ran eagerly
        records = timer.records()
        assert records and all(r.seconds > 0 for r in records)
        shapes[compile_] = [(r.rows, r.queries, r.keys) for r in records]
    assert shapes[True] == shapes[False]
