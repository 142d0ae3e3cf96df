"""The decode loop waits for the device no more often than its documented budget
(``dllm/engine/sync_budget.py``): host reads and data-dependent shapes are counted on CPU for every
strategy, cache mode and kind of stopper, per round."""
from __future__ import annotations

import pytest
import torch

import dllm
import dllm.engine.decoding as engine
import dllm.runner.model_runner as runner
from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.samplers.base import STRATEGIES
from dllm.engine.sync_budget import READS_PER_ROUND, read_budget
from host_syncs import HostSyncCounter

PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11]]  # ragged: the key-validity path runs
STRATEGY_ARGS = {"plain": {}, "freedave": {"num_drafts": 3}, "lopa": {"branches": 2}, "ssd": {"num_drafts": 4}}
DECODING = {
    "threshold": dict(policy="threshold", policy_args={"tau": 0.09}),
    "low_confidence": dict(policy="low_confidence"),
    "sched": dict(policy="low_confidence", stopper="sched", stopper_args={"tau_high": 3.0, "tau_low": 0.5}),
    "eotp": dict(policy="threshold", policy_args={"tau": 0.3}, stopper="eotp"),
}


class RoundCounter:
    """A strategy wrapper that counts rounds (calls of ``step``)."""

    def __init__(self, inner) -> None:
        self.inner, self.rounds = inner, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def step(self, state):
        self.rounds += 1
        return self.inner.step(state)


def test_every_strategy_has_a_budget():
    assert set(READS_PER_ROUND) == set(STRATEGIES)


@pytest.mark.parametrize("cache", ["none", "dual", "prefix"])
@pytest.mark.parametrize("decoding", list(DECODING))
@pytest.mark.parametrize("strategy", list(STRATEGY_ARGS))
def test_host_reads_within_budget(tiny_models, monkeypatch, strategy, decoding, cache):
    options = DECODING[decoding]
    if strategy in ("freedave", "ssd") and "stopper" in options:
        pytest.skip(f"{strategy} verifies the base rule alone (no stopper)")
    # the GPU's path: on a CPU the LM head also skips committed positions, selecting rows by a
    # boolean mask, which would wait for a GPU (dllm/runner/model_runner.py head_rows_pay_off says where)
    monkeypatch.setattr(runner, "head_rows_pay_off", lambda device: False)
    made = []
    make = engine.make_strategy
    monkeypatch.setattr(engine, "make_strategy", lambda *a: made.append(RoundCounter(make(*a))) or made[-1])
    config = GenerationConfig(gen_length=32, block_length=8, steps=16, cache=cache, strategy=strategy,
                              strategy_args=STRATEGY_ARGS[strategy], **options)
    with HostSyncCounter() as syncs:
        decode(tiny_models["llada"].model, PROMPTS, config)
    rounds = made[0].rounds
    budget = read_budget(strategy, rounds, config.num_windows, truncating=decoding == "eotp")
    assert syncs.total <= budget, f"{syncs.total} host syncs over {rounds} rounds > budget {budget}: {dict(syncs.by_name)}"


@pytest.mark.parametrize("cache", ["none", "dual"])
@pytest.mark.parametrize("strategy", ["plain", "lopa"])
def test_pipelined_host_reads_within_budget(monkeypatch, strategy, cache):
    """The pipelined mode (D2F) adds one read per round: the blocks in flight over the batch."""
    from dllm.models.bundled import resolve_model_path
    from dllm.engine.pipeline import Pipelined

    monkeypatch.setattr(runner, "head_rows_pay_off", lambda device: False)
    rounds = []
    step = Pipelined.step
    monkeypatch.setattr(Pipelined, "step", lambda self, state: rounds.append(1) or step(self, state))
    lm = dllm.load(resolve_model_path("dllm-waitingline-bd"), device="cpu", dtype="float32")
    config = GenerationConfig(gen_length=32, block_length=8, policy="low_confidence", policy_args={"tau": 0.9},
                              block_add_threshold=0.1, decoded_token_threshold=0.95, cache=cache,
                              strategy=strategy, strategy_args=STRATEGY_ARGS[strategy])
    prompts = [lm.encode("Sort these names: Bob Smith, Alice Jones."), lm.encode("Reverse: Eve Black.")]
    with HostSyncCounter() as syncs:
        decode(lm.model, prompts, config)
    budget = read_budget(strategy, len(rounds), config.num_windows, pipelined=True)
    assert syncs.total <= budget, f"{syncs.total} host syncs over {len(rounds)} rounds > budget {budget}: {dict(syncs.by_name)}"


@pytest.mark.parametrize("strategy", ["apd", "guided"])
def test_helper_strategies_host_reads_within_budget(monkeypatch, strategy):
    """APD and guided diffusion on the shipped Dream model with the shipped helper, over blocks."""
    monkeypatch.setattr(runner, "head_rows_pay_off", lambda device: False)
    made = []
    make = engine.make_strategy
    monkeypatch.setattr(engine, "make_strategy", lambda *a: made.append(RoundCounter(make(*a))) or made[-1])
    lm = dllm.load("dllm-waitingline-dream", device="cpu", dtype="float32", helper="dllm-waitingline-ar")
    prompts = [lm.encode("Sort these names: Bob Smith, Alice Jones."), lm.encode("Reverse: Eve Black.")]
    args = {"mixture_weight": 0.7} if strategy == "apd" else {}
    config = GenerationConfig(gen_length=32, block_length=8, strategy=strategy, strategy_args=args)
    with HostSyncCounter() as syncs:
        decode(lm.model, prompts, config)
    rounds = made[0].rounds
    budget = read_budget(strategy, rounds, config.num_windows)
    assert syncs.total <= budget, f"{syncs.total} host syncs over {rounds} rounds > budget {budget}: {dict(syncs.by_name)}"


@pytest.mark.parametrize("cache", ["none", "dual"])
def test_max_tokens_stops_rows_without_a_host_read(tiny_models, monkeypatch, cache):
    """``generate(max_tokens=...)`` stops a row once its text is decided (api/decided.py); with no
    stop strings that check runs on the device, so the decode keeps the plain budget, and it does
    stop rows: fewer forwards than decoding the whole canvas."""
    from dllm.api.decided import decided_rows
    from dllm.api.request import OutputRequest

    monkeypatch.setattr(runner, "head_rows_pay_off", lambda device: False)
    made = []
    make = engine.make_strategy
    monkeypatch.setattr(engine, "make_strategy", lambda *a: made.append(RoundCounter(make(*a))) or made[-1])
    lm = tiny_models["llada"]
    config = GenerationConfig(gen_length=32, block_length=32, steps=32, cache=cache, stop_at_eos=False)
    whole = decode(lm.model, PROMPTS, config)
    with HostSyncCounter() as syncs:
        cut = decode(lm.model, PROMPTS, config, decided=decided_rows(lm, OutputRequest(max_tokens=5), config))
    budget = read_budget("plain", made[-1].rounds, config.num_windows)
    assert syncs.total <= budget, f"{syncs.total} host syncs > budget {budget}: {dict(syncs.by_name)}"
    stopped = cut.nfe < whole.nfe  # a row with an end-of-text in its first 6 tokens decodes on
    assert stopped.any() and torch.all(cut.nfe <= whole.nfe)
    for row in stopped.nonzero().flatten().tolist():  # what it kept is the whole decode's
        first = int((cut.answer[row] == lm.model.mask_token_id).int().argmax())
        assert first > 5 and torch.equal(cut.answer[row, :first], whole.answer[row, :first])
