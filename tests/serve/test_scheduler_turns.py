"""The scheduler's admission rules, watched from outside: no more than ``max_batch`` rows decode
at once, keys take turns in order of their oldest waiting request, a waiting request that is
cancelled ends at once (it does not wait for a slot), and a finished request's id is free again."""
from __future__ import annotations

import collections
import dataclasses
import math

import pytest

from dllm import GenerationConfig
from dllm.serve.protocol import SchedulerLimits, ServeRequest
from dllm.serve.running_batch import RowProgress, RunningBatch, batch_key
from dllm.serve.scheduler import BatchScheduler
from tests.serve.test_scheduler import Collector


def _request(rid: str, block_length: int = 4, gen_length: int = 12, prompt: int = 5) -> ServeRequest:
    config = GenerationConfig(gen_length=gen_length, block_length=block_length, policy="low_confidence")
    return ServeRequest(request_id=rid, prompt_ids=[prompt, 7, 9], config=config, seed=1)


def _progress(rid: str, prompt: list[int], config: GenerationConfig) -> RowProgress:
    request = ServeRequest(request_id=rid, prompt_ids=prompt, config=config, seed=1)
    return RowProgress(request=request, on_update=lambda update: None, submitted=0.0)


class EndOrder(Collector):
    """A Collector that also keeps the order in which requests finished."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.order: list[str] = []

    def __call__(self, update) -> None:
        if update.finished:
            self.order.append(update.request_id)
        super().__call__(update)


def _serve(scheduler: BatchScheduler, requests: list[ServeRequest], collect: Collector) -> None:
    try:
        with scheduler._cond:  # all queued before the loop looks: the order below is the queue's
            for request in requests:
                scheduler.submit(request, collect)
        collect.wait()
    finally:
        scheduler.close()


def test_running_rows_never_exceed_max_batch(tiny_models, monkeypatch):
    lm = tiny_models["llada"]
    scheduler = BatchScheduler(lm, SchedulerLimits(max_batch=2, max_queue=16, forward_overhead_tokens=math.inf))
    widths, step = [], BatchScheduler._step

    def record(self, batch):
        widths.append(sum(len(b.rows) for b in self._batches if not b.done))
        step(self, batch)

    monkeypatch.setattr(BatchScheduler, "_step", record)
    requests = [_request(f"r{i}", gen_length=4 * (1 + i % 3), prompt=5 + i) for i in range(6)]
    _serve(scheduler, requests, Collector(len(requests)))
    assert max(widths) == 2


def test_keys_run_in_the_order_their_requests_came(tiny_models):
    lm = tiny_models["llada"]
    scheduler = BatchScheduler(lm, SchedulerLimits(max_batch=1, max_queue=16))
    requests = [_request("first", 4), _request("second", 2), _request("third", 6)]  # three batch keys
    collect = EndOrder(3)
    _serve(scheduler, requests, collect)
    assert collect.order == ["first", "second", "third"]


def test_a_cancelled_waiting_request_ends_before_the_running_one(tiny_models):
    lm = tiny_models["llada"]
    scheduler = BatchScheduler(lm, SchedulerLimits(max_batch=1, max_queue=16))
    collect = EndOrder(2)

    def cancel_waiting(update):
        collect(update)
        if update.request_id == "running" and not update.finished and "waiting" not in collect.order:
            scheduler.cancel("waiting")

    try:
        with scheduler._cond:
            scheduler.submit(_request("running", gen_length=32), cancel_waiting)
            scheduler.submit(_request("waiting", prompt=8), cancel_waiting)
        collect.wait()
    finally:
        scheduler.close()
    assert collect.order == ["waiting", "running"]
    assert collect.ends["waiting"].finish_reason == "cancelled" and collect.final.get("waiting", []) == []


def test_a_finished_request_id_can_be_used_again(tiny_models):
    lm = tiny_models["llada"]
    scheduler = BatchScheduler(lm, SchedulerLimits(max_batch=1, max_queue=16))
    try:
        for _ in range(2):
            collect = Collector(1)
            scheduler.submit(_request("again", gen_length=4), collect)
            collect.wait()
            assert collect.ends["again"].finish_reason in ("eos", "length")
    finally:
        scheduler.close()


def test_a_key_that_keeps_getting_requests_gives_the_other_key_its_turn(tiny_models):
    """While another key waits, the running key admits at most ``max_batch`` more rows, then
    drains: the other key's request runs before the running key's later ones."""
    lm = tiny_models["llada"]
    scheduler = BatchScheduler(lm, SchedulerLimits(max_batch=2, max_queue=16, forward_overhead_tokens=math.inf))
    mine = [_request(f"a{i}", gen_length=4 * (1 + i % 2), prompt=5 + i) for i in range(8)]
    collect = EndOrder(9)
    _serve(scheduler, [mine[0], _request("other", 2), *mine[1:]], collect)
    assert collect.order.index("other") < collect.order.index("a7")


def test_the_cost_model_times_every_round(tiny_models, monkeypatch):
    """Each decode round the scheduler runs is fed to its cost fit (else the fit never leaves
    "every forward costs the same" and rows never run side by side)."""
    from dllm.serve import running_batch

    lm = tiny_models["llada"]
    rounds, step = [], running_batch.RunningBatch.step

    def counted(self):
        rounds.append(1)
        return step(self)

    monkeypatch.setattr(running_batch.RunningBatch, "step", counted)
    scheduler = BatchScheduler(lm, SchedulerLimits(max_batch=2, max_queue=16))
    requests = [_request(f"c{i}", gen_length=4 * (1 + i), prompt=5 + i) for i in range(3)]
    _serve(scheduler, requests, Collector(len(requests)))
    assert len(rounds) >= 8 and scheduler.cost._rounds == len(rounds)


@pytest.mark.parametrize("waiting, gen_length, side", [([1, 2, 3, 4, 5], 4, False), ([1], 8, True)],
                         ids=["joins", "beside"])
def test_a_waiting_row_is_priced_against_the_batch_at_its_next_boundary(tiny_models, waiting, gen_length, side):
    """Under a cost all in tokens, a waiting row joins the running batch when, at the batch's
    next block boundary (where it would join), their canvases line up, and starts beside it when
    they would pad each other. Running: 1 prompt token + 8 answer positions, at block 0 of 2;
    at its next boundary it is (5 prefix, 4 left). A (5, 4) row shares it at no waste; a
    (1, 8) row would pad it to 2 x (5 + 8) = 26 tokens against 9 + 9 apart."""
    lm = tiny_models["llada"]
    scheduler = BatchScheduler(lm, SchedulerLimits(max_batch=4, max_queue=16, forward_overhead_tokens=0.0))
    scheduler.close()  # its loop thread ends: the test drives the decision by hand
    config = GenerationConfig(gen_length=8, block_length=4, cache="none", policy="low_confidence")
    key, joinable = batch_key(config, lm.model)
    scheduler._batches.append(RunningBatch(lm.model, [_progress("running", [9], config)], config, key, joinable))
    row = _progress("waiting", waiting, dataclasses.replace(config, gen_length=gen_length))
    assert (len(row.prefix), row.remaining) == ((1, 8) if side else (5, 4))
    scheduler._queues[key] = collections.deque([row])
    scheduler._start_side_batch()
    assert len(scheduler._batches) == (2 if side else 1)


def test_a_joining_row_is_budgeted_with_the_batch_it_joins_counted_once(tiny_models):
    """Under memory_budget_mb, rows join a running batch when the rebuilt canvas (the batch's
    rows and theirs) fits; the batch's present canvas, which the rebuild replaces, is not counted
    beside it. The budget here fits the rebuilt 2-row canvas and nothing more."""
    from dllm.engine.memory import MIB, plan_memory

    lm = tiny_models["llada"]
    probe = GenerationConfig(gen_length=8, block_length=4, cache="none", policy="low_confidence")
    plan = plan_memory(lm.model, 2, 1 + 8, probe)  # 2 rows of 1 prompt token + 8 positions
    config = dataclasses.replace(probe, memory_budget_mb=(plan.model_bytes + plan.decode_bytes) / MIB + 1e-6)
    scheduler = BatchScheduler(lm, SchedulerLimits(max_batch=4, max_queue=16, forward_overhead_tokens=math.inf))
    scheduler.close()  # its loop thread ends: the test drives the decision by hand
    key, joinable = batch_key(config, lm.model)
    batch = RunningBatch(lm.model, [_progress("running", [9], config)], config, key, joinable)
    scheduler._batches.append(batch)
    row = _progress("waiting", [7], config)
    scheduler._queues[key] = collections.deque([row])
    assert scheduler._joiners(batch) == [row]
