"""A cancel that arrives while a step runs (the client left mid-forward, from another thread)
stops the row at the next step boundary: no more forwards for it, and the batch ends when no row
is left, so the next request starts at once."""
from __future__ import annotations

import threading

import pytest

from dllm import GenerationConfig
from dllm.serve.protocol import SchedulerLimits, ServeRequest
from dllm.serve.scheduler import BatchScheduler
from tests.serve.test_scheduler import Collector

GEN = 64  # one token per step: 64 forwards if nothing stops the rows


class ForwardSpy:
    """Records the rows of each model forward; at forward ``at``, calls ``during`` (as a client
    thread would, while the step is running)."""

    def __init__(self, model, at: int, during) -> None:
        self.model, self.at, self.during, self.calls = model, at, during, 0
        self.rows: list[int] = []
        self.inner = model.forward

    def __call__(self, input_ids, *args, **kwargs):
        self.calls += 1
        self.rows.append(input_ids.shape[0])
        if self.calls == self.at:
            done = threading.Thread(target=self.during)
            done.start()
            done.join()  # the cancel lands while this forward is in flight
        return self.inner(input_ids, *args, **kwargs)


@pytest.mark.parametrize("continuous", [True, False], ids=["continuous", "static"])
@pytest.mark.parametrize("block_length", [GEN, 16], ids=["one_block", "blocks"])
def test_cancel_during_a_step_stops_every_forward_of_the_row(tiny_models, monkeypatch, continuous, block_length):
    lm = tiny_models["llada"]
    config = GenerationConfig(gen_length=GEN, block_length=block_length, steps=GEN, policy="low_confidence",
                              stop_at_eos=False)
    requests = [ServeRequest(request_id=f"n{i}", prompt_ids=[5, 9 + i, 11], config=config, seed=i) for i in range(2)]
    scheduler = BatchScheduler(lm, SchedulerLimits(max_batch=4, continuous=continuous))
    spy = ForwardSpy(lm.model, at=3, during=lambda: [scheduler.cancel(r.request_id) for r in requests])
    monkeypatch.setattr(lm.model, "forward", spy)
    collect = Collector(len(requests))
    try:
        for request in requests:
            scheduler.submit(request, collect)
        collect.wait(60)
        after = ServeRequest(request_id="next", prompt_ids=[7, 8], config=GenerationConfig(gen_length=4, block_length=4),
                             seed=0)
        nxt = Collector(1)
        scheduler.submit(after, nxt)
        nxt.wait(60)
    finally:
        scheduler.close()
    assert {collect.ends[r.request_id].finish_reason for r in requests} == {"cancelled"}
    # the forward in flight when the cancel came was the last one of the two rows' batch; every
    # later forward is the next request's alone
    assert spy.rows[:3] == [2, 2, 2] and set(spy.rows[3:]) == {1}
    assert max(collect.ends[r.request_id].stats["nfe"] for r in requests) <= 3
    assert nxt.ends["next"].finish_reason in ("eos", "length")
    assert scheduler.running_rows == 0
