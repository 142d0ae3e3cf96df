"""The graph runner's own bookkeeping, driven directly (``GraphRunner.run`` / ``lease``) with the
capture emulated (``EmulatedGraph``), for what whole decodes do not show: a replay's logits are
a copy the next replay leaves alone; a batch runs in its bucket's graph with the padding rows
holding the first row's inputs; masked and unmasked keys are two graphs; a slot is zeroed when
leased again; the least recently used free slot and graph go first (and the logits buffers
of dropped graphs with them), never a leased slot, and idle slots are freed when a new one does
not fit; captures hold ``CAPTURE_LOCK``; a window
past the slot's keys is refused. Mutation audit, round 6: each of these could be broken with
every decode test passing."""
from __future__ import annotations

import threading

import pytest
import torch

from dllm.models.visibility import KeyVisibility
from dllm.runner import graphs
from dllm.runner.model_runner import head_rows_pay_off


@pytest.fixture()
def model(tiny_models):
    return tiny_models["llada"].model


@pytest.fixture()
def runner():
    return graphs.GraphRunner(backend=graphs.EmulatedGraph)


def _inputs(model, rows: int, T: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 100, (rows, T), generator=g).to(model.device)
    positions = torch.arange(T, device=model.device).repeat(rows, 1)
    return tokens, positions


@torch.inference_mode()
def _run(runner, model, tokens, positions, valid=None) -> torch.Tensor:
    return runner.run(model, tokens, positions, KeyVisibility(valid=valid), None, 0, None)


@torch.inference_mode()
def _eager(model, tokens, positions, valid=None) -> torch.Tensor:
    return model.forward(tokens, positions, KeyVisibility(valid=valid), None, 0, None)


def test_a_replays_logits_are_a_copy_the_next_replay_leaves_alone(runner, model):
    first_in, second_in = _inputs(model, 3, 8, 0), _inputs(model, 3, 8, 1)
    first = _run(runner, model, *first_in)
    kept = first.clone()
    second = _run(runner, model, *second_in)
    assert runner.stats.captures == 1 and runner.stats.replays == 2  # one graph, replayed twice
    assert torch.equal(first, kept)  # not a view of the graph's output, which the replay rewrote
    torch.testing.assert_close(first, _eager(model, *first_in), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(second, _eager(model, *second_in), rtol=1e-5, atol=1e-5)


def test_a_batch_replays_its_buckets_graph_padded_with_its_first_row(runner, model):
    """3 rows capture the graph of 4, whose fourth row holds the first row's inputs (real ones:
    nothing out of range or fully masked); 4 rows then replay it, capturing nothing."""
    tokens, positions = _inputs(model, 3, 8, 2)
    valid = torch.ones(3, 8, dtype=torch.bool, device=model.device)
    valid[1, :2] = False  # a left-padded row
    _run(runner, model, tokens, positions, valid)
    (key, captured), = runner.graphs.items()
    assert key.rows == graphs.bucket(3) == 4 and captured.tokens.shape[0] == 4
    for static, given in ((captured.tokens, tokens), (captured.positions, positions), (captured.valid, valid)):
        assert torch.equal(static[:3], given) and torch.equal(static[3], given[0])
    four, four_pos = _inputs(model, 4, 8, 3)
    four_valid = torch.ones(4, 8, dtype=torch.bool, device=model.device)
    got = _run(runner, model, four, four_pos, four_valid)
    assert runner.stats.captures == 1 and len(runner.graphs) == 1
    torch.testing.assert_close(got, _eager(model, four, four_pos, four_valid), rtol=1e-5, atol=1e-5)


def test_masked_and_unmasked_keys_of_one_shape_are_two_graphs(runner, model):
    tokens, positions = _inputs(model, 2, 8, 4)
    valid = torch.ones(2, 8, dtype=torch.bool, device=model.device)
    valid[0, :3] = False
    _run(runner, model, tokens, positions)
    got = _run(runner, model, tokens, positions, valid)
    assert runner.stats.captures == 2 and {k.masked for k in runner.graphs} == {False, True}
    want = _eager(model, tokens, positions, valid)
    torch.testing.assert_close(got[:, 3:], want[:, 3:], rtol=1e-5, atol=1e-5)


def test_graphs_past_the_bound_go_least_recently_replayed_first_with_their_logits_buffers(runner, model):
    runner.max_graphs = 2
    for T in (8, 16, 8, 24):  # 8 is replayed after 16 was captured: 16 is the least recent
        _run(runner, model, *_inputs(model, 2, T, T))
    assert sorted(k.tokens for k in runner.graphs) == [8, 24] and runner.stats.evicted_graphs == 1
    assert sorted(buf.shape[1] for buf in runner.outputs.values()) == [8, 24]  # 16's buffer dropped with it
    assert runner.stats.output_bytes == sum(buf.nbytes for buf in runner.outputs.values())


def test_a_free_slot_is_zeroed_when_leased_again():
    runner = graphs.GraphRunner(backend=graphs.EmulatedGraph)
    layers, slot = runner.lease((3, 2, 16, 4), 2, torch.float32, torch.device("cpu"))
    for k, v in layers:
        k.fill_(1.0), v.fill_(2.0)
    slot.release()
    again, same = runner.lease((3, 2, 16, 4), 2, torch.float32, torch.device("cpu"))
    assert same is slot and runner.stats.slots == 1
    assert all(not k.any() and not v.any() for k, v in again)  # what a fresh allocation holds
    assert all(k.data_ptr() == k0.data_ptr() for (k, _), (k0, _) in zip(again, layers))  # the same static memory


def test_past_max_slots_the_least_recently_leased_free_slot_goes_never_a_leased_one():
    runner = graphs.GraphRunner(backend=graphs.EmulatedGraph, max_slots=2)
    cpu = torch.device("cpu")

    def lease(length):
        return runner.lease((1, 1, length, 4), 1, torch.float32, cpu)[1]

    a, b = lease(16), lease(32)
    b.release()
    a.release()
    lease(16).release()  # 16 leased again: now 32 is the least recently leased
    c = lease(48)
    assert sorted(shape[2] for shape in runner.slots) == [16, 48] and runner.stats.evicted_slots == 1
    a, d = lease(16), lease(64)  # 16 and 48 held: a third slot, nothing evicted
    assert {a.index, c.index} <= {s.index for group in runner.slots.values() for s in group}
    assert runner.stats.slots == 3 and runner.stats.evicted_slots == 1 and d.leased


def test_a_slot_that_does_not_fit_frees_the_idle_slots_first(monkeypatch):
    runner = graphs.GraphRunner(backend=graphs.EmulatedGraph)
    cpu = torch.device("cpu")
    idle = runner.lease((1, 1, 16, 4), 1, torch.float32, cpu)[1]
    idle.release()
    zeros, failed = torch.zeros, []

    def tight(*args, **kwargs):  # the device is full until an idle slot is freed
        if runner.stats.slots and not failed:
            failed.append(1)
            raise torch.OutOfMemoryError("out of memory")
        return zeros(*args, **kwargs)

    monkeypatch.setattr(graphs.torch, "zeros", tight)
    layers, slot = runner.lease((1, 1, 32, 4), 1, torch.float32, cpu)
    assert failed and layers[0][0].shape == (1, 1, 32, 4) and slot.leased
    assert list(runner.slots) == [(1, 1, 32, 4, 1, torch.float32, "cpu")] and runner.stats.evicted_slots == 1


def test_a_capture_holds_the_capture_lock(runner, model, monkeypatch):
    """Work on other threads (the server's prompt log-probabilities) takes CAPTURE_LOCK; a capture
    must hold it, or that work could run inside the capture."""
    seen = []

    class Checked(graphs.EmulatedGraph):
        def __init__(self, fn, pool, device):
            def probe():
                got = graphs.CAPTURE_LOCK.acquire(blocking=False)
                if got:
                    graphs.CAPTURE_LOCK.release()
                seen.append(got)

            thread = threading.Thread(target=probe)
            thread.start()
            thread.join()
            super().__init__(fn, pool, device)

    runner.backend = Checked
    _run(runner, model, *_inputs(model, 1, 8, 5))
    assert seen == [False]


def test_a_window_past_the_slots_keys_is_refused(runner, model):
    slot = graphs.KVSlot(index=0, layers=[(torch.zeros(1, 1, 16, 4), torch.zeros(1, 1, 16, 4))])
    tokens, positions = _inputs(model, 1, 8, 6)
    with pytest.raises(ValueError, match="passes the cache's 16 positions"):
        runner.run(model, tokens, positions, KeyVisibility(), slot, 9, None)
    assert runner.stats.captures == 0


def test_the_lm_head_selects_rows_on_a_cpu_only():
    """On a GPU selecting the window's rows for the head would make the host wait for the device."""
    assert head_rows_pay_off(torch.device("cpu")) is True
    assert head_rows_pay_off(torch.device("cuda", 0)) is False
