"""The batching scheduler: concurrent requests with mixed prompts, settings, constraints and arrival times
give exactly their single-run tokens, in continuous and static mode, for every cache; rows
really join a running batch at block boundaries; cancel and queue limits."""
from __future__ import annotations

import math
import re
import threading
import time

import pytest

from dllm import GenerationConfig
from dllm.api.stops import StopConditions
from dllm.api.structured import parse_constraint, row_constraint
from dllm.engine.decoding import decode
from dllm.samplers.constraints import json_answer_errors
from dllm.serve import running_batch
from dllm.serve.protocol import QueueFullError, SchedulerLimits, ServeRequest
from dllm.serve.scheduler import BatchScheduler

CACHES = {"none": dict(cache="none"), "prefix": dict(cache="prefix"), "dual": dict(cache="dual"),
          "sub_block": dict(cache="dual", sub_block_length=2)}
POLICIES = [dict(policy="low_confidence"),
            dict(policy="threshold", policy_args={"tau": 0.09}),
            dict(policy="threshold", policy_args={"tau": 0.09}, temperature=0.8)]


class Collector:
    """Gathers each request's updates; ``wait()`` until every one has finished."""

    def __init__(self, count: int) -> None:
        self.final: dict[str, list[int]] = {}
        self.ends: dict[str, object] = {}
        self.threads: set[str] = set()
        self.count, self.all_done = count, threading.Event()
        self.lock = threading.Lock()

    def __call__(self, update) -> None:
        with self.lock:
            self.threads.add(threading.current_thread().name)
            self.final.setdefault(update.request_id, []).extend(update.final_ids)
            if update.finished:
                self.ends[update.request_id] = update
                if len(self.ends) == self.count:
                    self.all_done.set()

    def wait(self, timeout: float = 120) -> None:
        assert self.all_done.wait(timeout), f"only {len(self.ends)} of {self.count} requests finished"


def mixed_requests(count: int, cache: dict) -> list[ServeRequest]:
    requests = []
    for i in range(count):
        config = GenerationConfig(gen_length=4 * (1 + i % 4), block_length=4, **cache, **POLICIES[i % 3])
        prompt = [(7 * i + j) % 200 + 3 for j in range(1 + (5 * i) % 7)]
        requests.append(ServeRequest(request_id=f"req{i}", prompt_ids=prompt, config=config, seed=100 + i))
    return requests


def single_run(model, request: ServeRequest) -> list[int]:
    return decode(model, [request.prompt_ids], request.config, seeds=[request.seed],
                  constraints=[request.constraint]).answer[0].tolist()


def serve_all(scheduler: BatchScheduler, requests: list[ServeRequest], *, pause_every: int = 0,
              pause: float = 0.0) -> Collector:
    """Submit every request (sleeping ``pause`` after every ``pause_every``-th, so arrivals
    spread over the run), wait until all have ended, close the scheduler."""
    collect = Collector(len(requests))
    try:
        for i, request in enumerate(requests):
            scheduler.submit(request, collect)
            if pause_every and i % pause_every == pause_every - 1:
                time.sleep(pause)
        collect.wait()
    finally:
        scheduler.close()
    return collect


def assert_single_runs(model, requests: list[ServeRequest], collect: Collector) -> None:
    for request in requests:
        assert collect.final[request.request_id] == single_run(model, request), request.request_id


@pytest.fixture
def compositions(monkeypatch):
    """Every batch the scheduler builds: (request id, answer positions already decoded) per row."""
    seen = []
    original = running_batch.RunningBatch.rebuild

    def rebuild(self, joining):
        original(self, joining)
        seen.append([(r.request.request_id, len(r.done_answer)) for r in self.rows])

    monkeypatch.setattr(running_batch.RunningBatch, "rebuild", rebuild)
    return seen


@pytest.mark.parametrize("continuous", [True, False], ids=["continuous", "static"])
@pytest.mark.parametrize("cache", CACHES)
def test_concurrent_requests_equal_single_runs(tiny_models, compositions, cache, continuous):
    lm = tiny_models["llada"]
    requests = mixed_requests(32, CACHES[cache])
    # every forward costing the same (a GPU below saturation): waiting rows always join
    scheduler = BatchScheduler(lm, SchedulerLimits(max_batch=6, max_queue=64, continuous=continuous,
                                                   forward_overhead_tokens=math.inf))
    collect = serve_all(scheduler, requests, pause_every=4, pause=0.005)
    assert collect.threads == {"dllm-scheduler"}
    assert all(collect.ends[request.request_id].finish_reason in ("eos", "length") for request in requests)
    assert_single_runs(lm.model, requests, collect)
    joined = [batch for batch in compositions if any(done > 0 for _, done in batch)
              and any(done == 0 for _, done in batch)]
    if continuous:
        assert joined, "no request joined a running batch at a block boundary"
    else:
        assert not joined, "a request joined a running batch under static batching"


# structured output under continuous batching: each request its own language (issue 40)
CONSTRAINED = [dict(json_schema={"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3}),
               dict(regex=r"[0-9]{3}-[0-9]{2}"), dict(choice=["yes", "no", "maybe not"]),
               dict(grammar='start: "(" [start ("," start)*] ")"'), dict()]


def constrained_requests(lm, count: int) -> list[ServeRequest]:
    requests = []
    for i in range(count):
        config = GenerationConfig(gen_length=8 * (1 + i % 2), block_length=4, cache="dual", **POLICIES[i % 3])
        spec = parse_constraint(**{"regex": None, "choice": None, "json_schema": None, **CONSTRAINED[i % 5]})
        constraint = row_constraint(lm, spec, StopConditions(), config.gen_length, config)
        prompt = [(7 * i + j) % 200 + 3 for j in range(1 + (5 * i) % 7)]
        requests.append(ServeRequest(request_id=f"req{i}", prompt_ids=prompt, config=config, seed=100 + i,
                                     constraint=constraint))
    return requests


def test_rows_of_different_constraints_share_batches_as_their_single_runs(tiny_models, compositions):
    """Requests each with its own constraint (a JSON schema, a regex, a choice, a grammar, or none)
    decode in one running batch, joining it at block boundaries (a joining row's constraint
    resumes after the answer it carries), and each answer is its single run's tokens and a word."""
    lm = tiny_models["llada"]
    requests = constrained_requests(lm, 10)
    scheduler = BatchScheduler(lm, SchedulerLimits(max_batch=4, max_queue=16, forward_overhead_tokens=math.inf))
    collect = serve_all(scheduler, requests, pause_every=2, pause=0.005)
    assert_single_runs(lm.model, requests, collect)
    kinds = {r.request_id: i % 5 for i, r in enumerate(requests)}
    mixed = [batch for batch in compositions if len({kinds[rid] for rid, _ in batch} - {4}) > 1]
    assert mixed, "no batch held rows of two different constraints"
    assert any(any(done > 0 and kinds[rid] != 4 for rid, done in batch) and any(done == 0 for _, done in batch)
               for batch in compositions), "no constrained row went on in a batch another request joined"
    texts = [lm.tokenizer.decode([t for t in collect.final[r.request_id] if t not in lm.model.eos_token_ids])
             for r in requests]
    schema = CONSTRAINED[0]["json_schema"]
    for i, text in enumerate(texts):
        kind = i % 5
        assert kind != 0 or json_answer_errors(text, schema) is None, text
        assert kind != 1 or re.fullmatch(r"[0-9]{3}-[0-9]{2}", text), text
        assert kind != 2 or text in ("yes", "no", "maybe not"), text
        assert kind != 3 or re.fullmatch(r"\((\(|\)|,)*\)", text), text
    assert not all(re.fullmatch(r"[0-9]{3}-[0-9]{2}", t) for t in texts[4::5])  # the free rows are not words


@pytest.mark.parametrize("overhead", [0.0, math.inf], ids=["linear_cost", "flat_cost"])
def test_rows_that_would_pad_a_batch_run_beside_it_exactly(tiny_models, monkeypatch, overhead):
    """When a forward's cost is all in its tokens, waiting rows that would pad the running
    batch's canvas start a batch of their own at once and the batches step in turns; when every
    forward costs the same, they join instead. Either way each row's tokens are its single run."""
    lm = tiny_models["llada"]
    requests = mixed_requests(24, CACHES["prefix"])
    scheduler = BatchScheduler(lm, SchedulerLimits(max_batch=6, max_queue=64, forward_overhead_tokens=overhead))
    side_by_side = []
    step = BatchScheduler._step

    def record(self, batch):
        side_by_side.append(len(self._batches))
        step(self, batch)

    monkeypatch.setattr(BatchScheduler, "_step", record)
    collect = serve_all(scheduler, requests, pause_every=3, pause=0.01)
    assert_single_runs(lm.model, requests, collect)
    assert (max(side_by_side) > 1) == (overhead == 0)


def test_cancel_frees_the_row_and_leaves_the_others_intact(tiny_models, compositions):
    lm = tiny_models["llada"]
    config = GenerationConfig(gen_length=16, block_length=4, policy="low_confidence")
    requests = [ServeRequest(request_id=f"c{i}", prompt_ids=[3 + i, 40, 41 + i], config=config, seed=i)
                for i in range(4)]
    scheduler = BatchScheduler(lm, SchedulerLimits(max_batch=4, continuous=True))
    collect = Collector(len(requests))

    def cancel_after_first(update):
        collect(update)
        if update.request_id == "c1" and not update.finished:
            scheduler.cancel("c1")

    try:
        for request in requests:
            scheduler.submit(request, cancel_after_first)
        collect.wait()
    finally:
        scheduler.close()
    cancelled = collect.ends["c1"]
    assert cancelled.finish_reason == "cancelled"
    assert cancelled.stats["nfe"] < 16  # it stopped costing forwards before the end
    assert all("c1" not in [rid for rid, _ in batch] for batch in compositions[1:])  # dropped at the boundary
    for request in requests:
        if request.request_id != "c1":
            assert collect.final[request.request_id] == single_run(lm.model, request)


def test_full_queue_raises_with_a_retry_estimate(tiny_models):
    lm = tiny_models["llada"]
    config = GenerationConfig(gen_length=64, block_length=8)
    scheduler = BatchScheduler(lm, SchedulerLimits(max_batch=1, max_queue=2))
    collect = Collector(0)
    try:
        with pytest.raises(QueueFullError, match="max_queue 2") as error:
            for i in range(6):
                scheduler.submit(ServeRequest(request_id=f"q{i}", prompt_ids=[5, 6], config=config), collect)
        assert error.value.retry_after > 0
    finally:
        scheduler.close()
    assert scheduler.queue_depth == 0 and scheduler.running_rows == 0


def test_bad_requests_are_refused_at_submit(tiny_models):
    lm = tiny_models["llada"]
    scheduler = BatchScheduler(lm)
    try:
        too_long = GenerationConfig(gen_length=lm.model.config.max_sequence_length)
        with pytest.raises(ValueError, match="shorten the prompt or lower max_tokens"):
            scheduler.submit(ServeRequest(request_id="a", prompt_ids=[5], config=too_long), print)
        with pytest.raises(ValueError, match="vocab"):
            scheduler.submit(ServeRequest(request_id="b", prompt_ids=[10**9], config=GenerationConfig()), print)
    finally:
        scheduler.close()


def test_batch_keys_separate_what_a_batch_cannot_mix(tiny_models):
    model = tiny_models["llada"].model
    base = GenerationConfig(gen_length=8, block_length=4)
    key, joinable = running_batch.batch_key(base, model)
    assert joinable
    assert running_batch.batch_key(GenerationConfig(gen_length=16, block_length=4, seed=3), model)[0] == key
    assert running_batch.batch_key(GenerationConfig(gen_length=8, block_length=2), model)[0] != key
    assert running_batch.batch_key(GenerationConfig(gen_length=8, block_length=4, steps=4), model)[0] != key
    stopper_key, stopper_joinable = running_batch.batch_key(
        GenerationConfig(gen_length=8, block_length=4, stopper="eotp"), model)
    assert not stopper_joinable


@pytest.fixture(scope="module")
def block_causal(tmp_path_factory):
    import dllm
    from dllm.models.tiny import write_tiny_checkpoint

    return dllm.load(write_tiny_checkpoint(tmp_path_factory.mktemp("bd"), "fast_dllm_v2", seed=5, block_size=4))


@pytest.mark.parametrize("family", ["dream", "fast_dllm_v2", "llada_stopper"])
def test_other_families_and_static_only_configs_equal_single_runs(tiny_models, block_causal, compositions, family):
    """Dream (shifted logits) and block-causal models join like LLaDA; answer-wide stoppers run
    their batches statically inside a continuous scheduler, exactly."""
    lm = block_causal if family == "fast_dllm_v2" else tiny_models["dream" if family == "dream" else "llada"]
    extra = dict(stopper="eotp", policy="threshold", policy_args={"tau": 0.09}) if family == "llada_stopper" else {}
    requests = [ServeRequest(request_id=f"{family}{i}", prompt_ids=[3 + i, 50 + i, 9][: 1 + i % 3], seed=i,
                             config=GenerationConfig(gen_length=8 if extra else 4 * (1 + i % 3), block_length=4,
                                                     cache="dual", **extra))
                for i in range(10)]
    scheduler = BatchScheduler(lm, SchedulerLimits(max_batch=3, continuous=True))
    collect = serve_all(scheduler, requests)
    assert_single_runs(lm.model, requests, collect)
    joined = any(any(done > 0 for _, done in batch) and any(done == 0 for _, done in batch) for batch in compositions)
    assert joined == (family in ("dream", "fast_dllm_v2"))


def test_cancelling_the_last_moving_row_of_a_block_keeps_the_others_exact(tiny_models):
    """Cancel a row while it is the only one still decoding its block: the block ends there, and
    the other row goes on from the next block exactly as its single run (sampling)."""
    lm = tiny_models["llada"]
    config = GenerationConfig(gen_length=16, block_length=4, policy="threshold", policy_args={"tau": 0.09},
                              temperature=0.8)
    fired = 0
    for pair in range(4):
        requests = {f"a{pair}": ServeRequest(request_id=f"a{pair}", prompt_ids=[11 + pair, 12], config=config, seed=pair),
                    f"b{pair}": ServeRequest(request_id=f"b{pair}", prompt_ids=[40 + pair], config=config, seed=50 + pair)}
        scheduler = BatchScheduler(lm, SchedulerLimits(max_batch=2, continuous=True))
        collect = Collector(2)
        positions = {rid: set() for rid in requests}
        cancelled = []

        def blocks_done(rid, positions=positions):
            return next(b for b in range(5) if not set(range(4 * b, 4 * b + 4)) <= positions[rid])

        def watch(update, positions=positions, cancelled=cancelled, scheduler=scheduler, collect=collect):
            collect(update)  # updates of one round all arrive before the next round
            positions[update.request_id].update(update.committed)
            one, other = sorted(positions, key=blocks_done)
            if not cancelled and blocks_done(one) < blocks_done(other) < 4 and one not in collect.ends:
                cancelled.append(one)  # ``one`` alone still decodes the block ``other`` finished
                scheduler.cancel(one)

        with scheduler._cond:  # both rows start in the same batch
            for request in requests.values():
                scheduler.submit(request, watch)
        try:
            collect.wait()
        finally:
            scheduler.close()
        if cancelled:
            fired += 1
            kept = next(rid for rid in requests if rid != cancelled[0])
            assert collect.ends[cancelled[0]].finish_reason == "cancelled"
            assert collect.final[kept] == single_run(lm.model, requests[kept])
    assert fired, "the cancel never hit a row that was the last one moving in its block"
