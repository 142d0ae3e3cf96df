"""Block-causal batches take joins (issue 37, item 2): rows of different answer lengths and
ragged prompts join a running batch where one of the model's blocks ends and each still gives
its single run's tokens, under blocks counted from position 0 (Fast-dLLM v2, SDAR: a prompt tail
leads the answer region) and from the answer start (dllm's own block-diffusion layout)."""
from __future__ import annotations

import math

import pytest

from dllm import GenerationConfig
from dllm.serve.protocol import SchedulerLimits, ServeRequest
from dllm.serve.scheduler import BatchScheduler
from tests.block_causal_tiny import KINDS, PREAMBLE, TAILS, tiny_block_causal
from tests.serve.test_scheduler import assert_single_runs, compositions, serve_all  # noqa: F401 (fixture)

# windows of the model's block (4), and half of it: rows then join every second block
SHAPES = {"block": dict(block_length=4), "half_block": dict(block_length=2)}
CACHES = {"none": dict(cache="none"), "dual": dict(cache="dual")}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("bc_joins")
    return {kind: tiny_block_causal(root / kind, kind) for kind in KINDS}


def requests_for(shape: dict, cache: dict, count: int = 14) -> list[ServeRequest]:
    requests = []
    for i in range(count):
        gen = 4 * (1 + i % 4)  # 4-16 answer tokens: rows of different lengths share batches
        policy = dict(policy="low_confidence") if i % 2 else dict(policy="threshold", policy_args={"tau": 0.05})
        config = GenerationConfig(gen_length=gen, steps=gen, stop_at_eos=False, **shape, **cache, **policy)
        prompt = PREAMBLE[: 3 + (5 * i) % 17] + TAILS[i % len(TAILS)]  # ragged: tails end mid-block
        requests.append(ServeRequest(request_id=f"bc{i}", prompt_ids=prompt, config=config, seed=50 + i))
    return requests


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", KINDS)
def test_rows_join_block_causal_batches_and_keep_their_single_run_tokens(models, compositions, kind, shape, cache):
    model = models[kind]
    requests = requests_for(SHAPES[shape], CACHES[cache])
    # every forward costing the same: waiting rows join a running batch rather than run beside it
    scheduler = BatchScheduler(model, SchedulerLimits(max_batch=5, max_queue=64, forward_overhead_tokens=math.inf))
    collect = serve_all(scheduler, requests, pause_every=3, pause=0.005)
    assert all(collect.ends[r.request_id].finish_reason in ("eos", "length") for r in requests)
    assert_single_runs(model, requests, collect)
    joined = [batch for batch in compositions if any(done > 0 for _, done in batch)
              and any(done == 0 for _, done in batch)]
    assert joined, "no request joined a running block-causal batch"
    # a resumed row's prefix ends where a model block ends: its finished answer plus its prompt
    # tail fill whole blocks of 4
    prompts = {r.request_id: len(r.prompt_ids) for r in requests}
    for batch in joined:
        for rid, done in batch:
            if done:
                end = (prompts[rid] + done) if kind != "answer_origin" else done
                assert end % 4 == 0, (rid, done)
