"""A served row's stats under continuous batching are its single run's: the forwards charged to
it (nfe) summed over every batch it passed through (rows join, rows leave, the batch is rebuilt
at block boundaries), and its answer tokens counted to its end-of-text."""
from __future__ import annotations

import math

from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.serve.protocol import SchedulerLimits, ServeRequest
from dllm.serve.scheduler import BatchScheduler
from tests.serve.test_scheduler import compositions, serve_all  # noqa: F401 (a fixture)


def _requests() -> list[ServeRequest]:
    # threshold policy: each row's forwards per block differ, so a neighbour's count is not its own
    requests = []
    for i in range(8):
        config = GenerationConfig(gen_length=4 * (2 + i % 3), block_length=4, policy="threshold",
                                  policy_args={"tau": 0.09}, temperature=0.8)
        requests.append(ServeRequest(request_id=f"s{i}", prompt_ids=[5 + 3 * i, 60 + i, 7][: 1 + i % 3],
                                     config=config, seed=20 + i))
    return requests


def test_served_nfe_and_tokens_equal_the_single_run(tiny_models, compositions):
    lm = tiny_models["llada"]
    requests = _requests()
    scheduler = BatchScheduler(lm, SchedulerLimits(max_batch=3, max_queue=16, forward_overhead_tokens=math.inf))
    collect = serve_all(scheduler, requests, pause_every=2, pause=0.005)
    resumed = {rid for batch in compositions for rid, done in batch if done > 0}
    assert resumed, "no row went on in a rebuilt batch: the test would not see its counters carried"
    eos = set(lm.model.eos_token_ids)
    for request in requests:
        alone = decode(lm.model, [request.prompt_ids], request.config, seeds=[request.seed])
        answer = alone.answer[0].tolist()
        end = next((j for j, t in enumerate(answer) if t in eos), None)
        stats = collect.ends[request.request_id].stats
        assert stats["nfe"] == int(alone.nfe[0]), request.request_id
        assert stats["tokens"] == (len(answer) if end is None else end + 1), request.request_id
        assert stats["tpf"] == stats["tokens"] / int(alone.nfe[0])
