"""The timing code's CUDA branches, run here with torch.cuda stood in for (no GPU): every wait
and memory reading names the model's device, which on a multi-GPU machine is not the current one
(cuda:1 here); a wait with no device would wait for cuda:0 and time nothing of the forward's, a
peak of cuda:0 would report another model's memory."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch

from dllm.bench import batch_invariance, gpu_measure as gm, gpu_modes
from dllm.bench.device_peaks import device_peak
from dllm.bench.forward_timer import ForwardTimer
from dllm.bench.random_models import build_random_model
from dllm.engine import decoding
from dllm.engine.config import GenerationConfig

CUDA1 = torch.device("cuda", 1)


@pytest.fixture
def waits(monkeypatch):
    """Each torch.cuda.synchronize call's device, in order (None: the current device)."""
    seen: list = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: seen.append(device))
    return seen


def test_decode_and_mode_waits_name_the_models_device(waits):
    decoding._sync(SimpleNamespace(device=CUDA1))
    gpu_modes._sync(CUDA1)
    decoding._sync(SimpleNamespace(device=torch.device("cpu")))  # no wait on the CPU
    gpu_modes._sync(torch.device("cpu"))
    assert waits == [CUDA1, CUDA1]


def test_batch_invariance_timing_waits_around_each_forward(monkeypatch, waits):
    """Each timed forward starts after the device is idle and ends when its work is done."""
    monkeypatch.setattr(batch_invariance, "_forward", lambda model, prompts, gen: waits.append("forward"))
    batch_invariance._timed(SimpleNamespace(device=CUDA1), [[1, 2]], 4)
    assert waits == [CUDA1, "forward", CUDA1] * batch_invariance.REPEATS


class _Event:
    """A CUDA event that notes the host time it was recorded and the stream it went on."""

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.at = self.stream = None

    def record(self, stream=None) -> None:
        self.at, self.stream = time.perf_counter(), stream

    def elapsed_time(self, end: "_Event") -> float:
        return (end.at - self.at) * 1000.0


def test_run_decode_reads_the_models_device_peak(monkeypatch, waits):
    """A timed decode on cuda:1: the peak is reset and read on cuda:1, its forwards are timed by
    events on cuda:1's stream, and the events are read after one wait on cuda:1."""
    memory: list = []
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: SimpleNamespace(device=device))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: memory.append(("reset", device)))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated",
                        lambda device=None: memory.append(("peak", device)) or 12345)
    events: list = []

    def on_cuda1(model):
        timer = ForwardTimer(model)
        timer.device, timer.cuda = CUDA1, True
        timer._graph_hooks = lambda: None  # an eager decode replays no graph (the model is on the CPU)
        stamp = timer._stamp
        timer._stamp = lambda: events.append(stamp()) or events[-1]
        return timer

    monkeypatch.setattr(gm, "ForwardTimer", on_cuda1)
    model = build_random_model("tiny-llada", device=torch.device("cpu"), dtype=torch.float32)
    method = gm.Method("dual", {"cache": "dual"}, tokens_per_step=4)  # one step: two forwards
    row = gm.run_decode(model, method, gm.Shape(2, 3, 4, 4), device_peak("x"), {})
    assert "error" not in row, row
    assert memory == [("reset", CUDA1), ("peak", CUDA1)] and row["peak_memory_bytes"] == 12345
    assert events and all(e.stream.device == CUDA1 for e in events)
    assert row["forwards"] == len(events) // 2 and row["forward_s"] > 0
    assert CUDA1 in waits and None not in waits


def test_run_decode_names_out_of_memory_and_goes_on(monkeypatch):
    """A decode that runs out of GPU memory is a row naming it, not a crash of the whole run."""
    def oom(model, prompts, config):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")

    monkeypatch.setattr(gm, "decode", oom)
    model = build_random_model("tiny-llada", device=torch.device("cpu"), dtype=torch.float32)
    row = gm.run_decode(model, gm.Method("dual", {"cache": "dual"}), gm.Shape(1, 5, 8, 8), device_peak("x"), {})
    assert row["error"] == "out of memory: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert row["batch"] == 1 and "wall_s" not in row


def test_a_decodes_wall_time_waits_for_the_device_before_and_after(monkeypatch):
    """On CUDA the host runs ahead of the device: a decode waits for its device before its clock
    starts and again before it stops, so wall_time holds every forward it queued (the timing
    stands in for CUDA's wait, as a CPU one need not wait)."""
    events: list = []
    monkeypatch.setattr(decoding, "_sync", lambda model: events.append(("wait", model)))
    model = build_random_model("tiny-llada", device=torch.device("cpu"), dtype=torch.float32)
    model.register_forward_hook(lambda *args: events.append("forward"))
    config = GenerationConfig(gen_length=4, block_length=4, steps=2, cache="dual", stop_at_eos=False)
    result = decoding.decode(model, [[5, 6, 7], [8, 9]], config)
    forwards = events.count("forward")
    assert events == [("wait", model)] + ["forward"] * forwards + [("wait", model)]
    assert forwards == int(result.nfe.max()) and result.wall_time > 0
