"""``GenerationConfig(compile=True)``: the compiled forward gives the tokens, order and NFE of
the eager one for every cache mode (refresh and window forwards, in-place K/V writes) and for
candidate batches. Uses the ``aot_eager`` backend (graph capture without code generation, which
takes minutes on a small CPU); a GPU run repeats it with ``DLLM_COMPILE_BACKEND=inductor``."""
from __future__ import annotations

import os
import warnings

import pytest
import torch

from dllm import GenerationConfig
from dllm.runner.compiled import compile_available
from dllm.engine.decoding import decode

REASON = compile_available()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"torch.compile unavailable: {REASON}")
PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11]]


@pytest.fixture(autouse=True)
def backend(monkeypatch):
    monkeypatch.setenv("DLLM_COMPILE_BACKEND", os.environ.get("DLLM_TEST_COMPILE_BACKEND", "aot_eager"))
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("options", [dict(cache="dual"), dict(cache="prefix"), dict(cache="none"),
                                     dict(cache="dual", strategy="lopa")],
                         ids=["dual", "prefix", "none", "dual-lopa"])
def test_compiled_decode_equals_eager(tiny_models, options):
    model = tiny_models["llada"].model
    config = dict(gen_length=16, block_length=8, steps=8, policy="threshold", policy_args={"tau": 0.09}, **options)
    eager = decode(model, PROMPTS, GenerationConfig(**config))
    compiled = decode(model, PROMPTS, GenerationConfig(**config, compile=True))
    assert torch.equal(eager.answer, compiled.answer)
    assert torch.equal(eager.order, compiled.order) and torch.equal(eager.nfe, compiled.nfe)


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
