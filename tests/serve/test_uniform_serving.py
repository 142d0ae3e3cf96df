"""DiffusionGemma behind the batching scheduler: concurrent requests of mixed prompts and lengths,
joining running batches at canvas boundaries, each get their single run's tokens (uniform-state
decoding's draws are per row, keyed by its seed, step count and answer position)."""
from __future__ import annotations

import math

import pytest

import dllm
from dllm import GenerationConfig
from dllm.serve.protocol import SchedulerLimits, ServeRequest
from dllm.serve.scheduler import BatchScheduler
from tests.models.gemma_tiny import CANVAS, write_reference
from tests.serve.test_scheduler import assert_single_runs, compositions, serve_all  # noqa: F401  (fixture)


@pytest.fixture(scope="module")
def gemma_lm(tmp_path_factory):
    out = tmp_path_factory.mktemp("serve_gemma")
    write_reference(out, seed=3, std=0.05)
    return dllm.load(out, device="cpu", dtype="float32")


def test_concurrent_requests_equal_single_runs(gemma_lm, compositions):
    requests = []
    for i in range(4):
        canvases = 1 + i % 2
        config = GenerationConfig(gen_length=canvases * CANVAS, block_length=CANVAS, steps=3 * canvases)
        prompt = [(7 * i + j) % 200 + 6 for j in range(1 + (5 * i) % 7)]
        requests.append(ServeRequest(request_id=f"req{i}", prompt_ids=prompt, config=config, seed=100 + i))
    scheduler = BatchScheduler(gemma_lm, SchedulerLimits(max_batch=4, max_queue=16, continuous=True,
                                                         forward_overhead_tokens=math.inf))
    collect = serve_all(scheduler, requests, pause_every=2, pause=0.005)
    assert_single_runs(gemma_lm.model, requests, collect)
    assert any(any(done > 0 for _, done in batch) and any(done == 0 for _, done in batch) for batch in compositions), \
        "no request joined a running batch at a canvas boundary"
