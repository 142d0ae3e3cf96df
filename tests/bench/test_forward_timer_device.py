"""ForwardTimer on CUDA records its events on the model's device's stream, not the current
device's: on cuda:1 with cuda:0 current, events on cuda:0 bracketed none of the forward's work.
No GPU here: torch.cuda's Event and current_stream are stand-ins that note where they record."""
from __future__ import annotations

import torch

from dllm.bench import forward_timer
from dllm.bench.forward_timer import ForwardTimer


class _Stream:
    def __init__(self, device) -> None:
        self.device = torch.device(device)


class _Event:
    def __init__(self, enable_timing: bool = False) -> None:
        self.stream = None

    def record(self, stream=None) -> None:
        self.stream = stream


def test_events_are_recorded_on_the_model_devices_stream(monkeypatch):
    monkeypatch.setattr(forward_timer.torch.cuda, "Event", _Event)
    monkeypatch.setattr(forward_timer.torch.cuda, "current_stream", lambda device=None: _Stream(device))
    timer = ForwardTimer(torch.nn.Linear(2, 2))
    timer.device, timer.cuda = torch.device("cuda", 1), True  # the CUDA branch, without a GPU
    event = timer._stamp()
    assert event.stream is not None and event.stream.device == torch.device("cuda", 1)
