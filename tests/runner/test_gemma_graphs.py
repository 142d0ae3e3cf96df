"""DiffusionGemma with ``cuda_graphs=True``: the denoiser's forwards replay from graphs (one per
canvas of a decode and self-conditioning or not; the encoder runs eagerly, once a canvas) and give
the eager decode's tokens, ragged batch included.

The capture is emulated on CPU (``EmulatedGraph``, as tests/runner/test_cuda_graphs.py does). The
model's experts must then run the Triton grouped product (the torch path reads its offsets on the
host, which a capture cannot hold), so the equality check runs this file as a script under
``DLLM_KERNELS=triton TRITON_INTERPRET=1`` (natively on a GPU, where the capture is real)."""
from __future__ import annotations

import sys
import weakref

import pytest
import torch

from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.runner import graphs
from tests.kernels.kernel_subprocess import NO_TRITON, run_kernel_check, skip_interpreted
from tests.models.test_gemma_batch_invariant import CANVAS, PROMPTS, tiny_gemma

STEPS = 2  # denoiser forwards a canvas at most: the second self-conditioned


def _config(**options) -> GenerationConfig:
    return GenerationConfig(gen_length=2 * CANVAS, block_length=CANVAS, steps=2 * STEPS, strategy="uniform",
                            cache="encoder", policy="eb_sampler", seed=3, **options)


def _replayed_equals_eager(device: str) -> None:
    graphs.BACKEND = graphs.EmulatedGraph if device == "cpu" else graphs.CudaGraph
    graphs._RUNNERS = weakref.WeakKeyDictionary()
    model = tiny_gemma().to(device)
    forwards = 0
    other = [[t + 1 for t in PROMPTS[1]]]  # the same shapes: it replays the second decode's graphs on its own prefix
    for prompts in (list(PROMPTS), [PROMPTS[1]], other):
        eager = decode(model, prompts, _config())
        replayed = decode(model, prompts, _config(cuda_graphs=True))
        assert torch.equal(eager.answer, replayed.answer), (eager.answer, replayed.answer)
        assert torch.equal(eager.nfe, replayed.nfe)
        forwards += int(eager.nfe.max())  # denoiser forwards of the batch
    stats = graphs.graph_stats(model)
    # per batch bucket (4, then 1) and canvas (2: prefix lengths differ) a graph without
    # self-conditioning (its first step) and one with it; the encoder ran eagerly per canvas (the
    # prompt, then the first canvas) of each of the 3 decodes
    assert stats["captures"] == 2 * 2 * 2 and stats["eager_forwards"] == 3 * 2
    assert stats["replays"] == forwards
    # one static self-conditioning input per batch bucket and canvas shape, shared by the canvases'
    # conditioned graphs like the logits buffer, and counted
    runner = graphs.graph_runner(model)
    conditioned = {c.conditioning.data_ptr() for c in runner.graphs.values() if c.conditioning is not None}
    assert len(conditioned) == 2 and stats["output_bytes"] == sum(b.nbytes for b in runner.outputs.values())


def test_the_torch_expert_product_is_a_capture_error_naming_the_fix(monkeypatch, test_device):
    if test_device != "cpu":
        pytest.skip("on CUDA the expert product runs the Triton kernel, which reads nothing on the host")
    monkeypatch.setattr(graphs, "BACKEND", graphs.EmulatedGraph)
    monkeypatch.setattr(graphs, "_RUNNERS", weakref.WeakKeyDictionary())
    model = tiny_gemma()
    with pytest.raises(RuntimeError, match=r"could not be captured .*host read.*cuda_graphs=False"):
        decode(model, [PROMPTS[0]], _config(cuda_graphs=True))


def test_the_memory_plan_counts_the_denoiser_graphs_buffers():
    """Under graphs a decode also holds the encoded prefix's static copy at the batch's bucket and
    float32 static logits and self-conditioning buffers of a canvas at the bucket."""
    from dllm.engine.memory import kv_cache_bytes, plan_memory

    model = tiny_gemma()
    eager = plan_memory(model, 3, 24, _config())
    replayed = plan_memory(model, 3, 24, _config(cuda_graphs=True))
    assert replayed.kv_cache_bytes - eager.kv_cache_bytes == 2 * kv_cache_bytes(model, 4, 24) - kv_cache_bytes(model, 3, 24)
    assert replayed.logits_bytes - eager.logits_bytes == 2 * 4 * CANVAS * model.lm_head.out_features * 4


@skip_interpreted
def test_replayed_gemma_decode_equals_eager_through_the_interpreted_kernels():
    pytest.importorskip("triton", reason=NO_TRITON)
    run_kernel_check(__file__, "cpu", interpret=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the real capture needs a GPU")
def test_replayed_gemma_decode_equals_eager_on_gpu():
    pytest.importorskip("triton", reason=NO_TRITON)
    run_kernel_check(__file__, "cuda", interpret=False)


if __name__ == "__main__":
    with torch.inference_mode():
        _replayed_equals_eager(sys.argv[1])
    print("KERNEL-OK")
