"""Retry-After is the queue's measured drain time (issue 37): queued rows over the rate rows
finished at recently, per second of decoding. The old estimate multiplied a latency that already
held queue time by the queued rounds (67 s for a queue that drained in 7.5 s)."""
from __future__ import annotations

import time

import pytest

import dllm
from dllm import GenerationConfig
from dllm.serve.drain_rate import DrainRate
from dllm.serve.protocol import QueueFullError, SchedulerLimits, ServeRequest
from dllm.serve.scheduler import BatchScheduler


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def rate_with(rows: list[tuple[float, float]], now: float, **options) -> DrainRate:
    """A DrainRate that saw rows of (admitted, finished) times, read at ``now``."""
    clock = Clock()
    drain = DrainRate(clock=clock, **options)
    for start, end in sorted(rows, key=lambda r: r[1]):
        clock.now = end
        drain.finished(end - start)
    clock.now = now
    return drain


def test_nothing_measured_yet_gives_the_lower_bound():
    assert DrainRate(min_s=1.0).drain_seconds(50) == 1.0
    assert rate_with([(100.0, 100.0)], 101.0).rows_per_second() is None  # a row that never decoded


def test_a_batch_finishing_at_once_counts_its_whole_decode():
    drain = rate_with([(100.0, 102.0)] * 4, 102.5)  # 4 rows decoded together for 2 s: 2 rows / s
    assert drain.rows_per_second() == pytest.approx(2.0)
    assert drain.drain_seconds(10) == pytest.approx(5.0)


def test_idle_time_between_bursts_does_not_count():
    rows = [(100.0, 101.0)] * 3 + [(150.0, 151.0)] * 3  # 6 rows over 2 s of decoding, 50 s apart
    assert rate_with(rows, 151.0).rows_per_second() == pytest.approx(3.0)


def test_overlapping_rows_count_their_union():
    rows = [(100.0, 104.0), (101.0, 103.0), (103.5, 106.0), (110.0, 111.0)]  # busy 100-106 and 110-111: 7 s
    assert rate_with(rows, 111.0).rows_per_second() == pytest.approx(4 / 7)


def test_only_the_recent_window_counts():
    rows = [(0.0, 10.0)] + [(190.0, 191.0)] * 2  # the first finished 181 s before now
    assert rate_with(rows, 191.0, window_s=60.0).rows_per_second() == pytest.approx(2.0)
    assert rate_with(rows, 191.0, max_rows=1).rows_per_second() == pytest.approx(1.0)  # the last row only


def test_bounds():
    drain = rate_with([(100.0, 101.0)], 101.0, min_s=1.0, max_s=60.0)  # 1 row / s
    assert drain.drain_seconds(0) == 1.0
    assert drain.drain_seconds(7) == pytest.approx(7.0)
    assert drain.drain_seconds(1000) == 60.0
    with pytest.raises(ValueError, match="min_s <= max_s"):
        DrainRate(min_s=5.0, max_s=1.0)


def run_rows(scheduler: BatchScheduler, config: GenerationConfig, prefix: str, count: int) -> None:
    """Submit ``count`` rows and wait (at most 120 s) for all of them to finish."""
    finished = []
    for i in range(count):
        scheduler.submit(ServeRequest(request_id=f"{prefix}{i}", prompt_ids=[5, 6, 7], config=config, seed=i),
                         lambda u: finished.append(u) if u.finished else None)
    deadline = time.monotonic() + 120
    while len(finished) < count:
        assert time.monotonic() < deadline, f"{len(finished)} of {count} rows finished in 120 s"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def paced_model(tiny_dirs):
    """A tiny model whose every forward takes FORWARD_S (its compute padded to it, not added to
    it): the rows' pace is the model's, not that of whatever else shares the CPU, which slowed
    the measured rows and not the burst's (a 429 said 8.7 s for a queue that drained in 4.3 s)."""
    lm = dllm.load(tiny_dirs["llada"])
    started: list[float] = []
    lm.model.register_forward_pre_hook(lambda module, args: started.append(time.perf_counter()))
    lm.model.register_forward_hook(
        lambda module, args, out: time.sleep(max(0.0, started.pop() + FORWARD_S - time.perf_counter())))
    return lm


FORWARD_S = 0.3  # above a tiny forward's compute on a loaded 2-core CPU (at 0.1 s a burst of CI load
# slowed the measured rows 2.5x past the padding: a 429 said 14.2 s for a queue that drained in 5.8 s)
STEPS = 4  # forwards a row (2 tokens each): the padded pace, not the number of forwards, is measured


def test_retry_after_matches_the_time_a_burst_takes_to_drain(paced_model):
    """A burst fills the queue of a scheduler that has served a round of the same rows: the 429's
    retry_after is within a factor 2 of the time the queue then takes to empty."""
    config = GenerationConfig(gen_length=8, block_length=8, steps=STEPS)
    warm = BatchScheduler(paced_model, SchedulerLimits(max_batch=2, max_queue=8))
    try:
        run_rows(warm, config, "warm", 2)  # the first forwards pay one-time costs: not measured below
    finally:
        warm.close()
    scheduler = BatchScheduler(paced_model, SchedulerLimits(max_batch=2, max_queue=8))
    try:
        run_rows(scheduler, config, "measure", 6)
        submitted = 0
        with pytest.raises(QueueFullError) as error:
            for submitted in range(12):
                scheduler.submit(ServeRequest(request_id=f"burst{submitted}", prompt_ids=[5, 6, 7], config=config),
                                 lambda u: None)
        start, queued = time.perf_counter(), scheduler.queue_depth
        deadline = time.monotonic() + 120
        while scheduler.queue_depth:
            assert time.monotonic() < deadline, "the queue did not drain in 120 s"
            time.sleep(0.005)
        drained = time.perf_counter() - start
    finally:
        scheduler.close()
    assert queued == 8 and submitted >= 8
    assert drained >= 3 * STEPS * FORWARD_S  # 3 to 4 pairs of rows of STEPS forwards finish first: the pace holds
    assert drained / 2 <= error.value.retry_after <= drained * 2, (error.value.retry_after, drained)
