"""The serving scheduler shares prompt K/V across requests of a block-causal model
(dllm/cache/prompt_store.py): each answer equals its single run without a store, later requests
reuse the blocks of earlier ones, and /metrics shows the store's counters."""
from __future__ import annotations

import pytest

from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.serve.metrics import ServerMetrics
from dllm.serve.protocol import SchedulerLimits, ServeRequest
from dllm.serve.scheduler import BatchScheduler
from test_scheduler import serve_all
from tests.block_causal_tiny import PREAMBLE, TAILS, tiny_block_causal


@pytest.fixture(scope="module", params=["sdar", "answer_origin"])
def model(request, tmp_path_factory):
    return tiny_block_causal(tmp_path_factory.mktemp(request.param), request.param)


def test_the_scheduler_shares_prompt_blocks_across_requests(model):
    """Requests with a shared preamble through the serving scheduler (static batches of a
    block-causal model): each answer equals its single run without a store, and later requests
    reused the earlier ones' blocks."""
    cfg = GenerationConfig(gen_length=8, block_length=4, steps=8, cache="dual", stop_at_eos=False,
                           policy="threshold", policy_args={"tau": 0.3})
    requests = [ServeRequest(request_id=f"r{i}", prompt_ids=PREAMBLE + TAILS[i % len(TAILS)], config=cfg, seed=i)
                for i in range(8)]
    scheduler = BatchScheduler(model, SchedulerLimits(max_batch=3, prompt_cache_bytes=32 << 20))
    collect = serve_all(scheduler, requests)
    for request in requests:
        single = decode(model, [request.prompt_ids], cfg, seeds=[request.seed]).answer[0].tolist()
        assert collect.final[request.request_id] == single, request.request_id
    assert scheduler.prompt_store.stats.tokens_reused > 0
    scraped = ServerMetrics(scheduler).render().decode()
    reused = scheduler.prompt_store.stats.tokens_reused
    assert f"dllm_prompt_cache_tokens_reused_total {float(reused)}" in scraped
    assert f"dllm_prompt_cache_bytes {float(scheduler.prompt_store.bytes)}" in scraped


def test_no_store_when_the_size_is_zero(model):
    scheduler = BatchScheduler(model, SchedulerLimits(prompt_cache_bytes=0))
    try:
        assert scheduler.prompt_store is None
        assert "dllm_prompt_cache" not in ServerMetrics(scheduler).render().decode()
    finally:
        scheduler.close()
