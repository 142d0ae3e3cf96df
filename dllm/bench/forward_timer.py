"""Time every forward the engine makes, without changing the engine: module hooks around the
model's ``forward``.

On CUDA each forward is bracketed by two CUDA events recorded on the model device's current stream (read after
the decode's final synchronisation, so timing adds no host sync inside a step); elsewhere by
``time.perf_counter``. Each record keeps the forward's shape (rows N, query length T, key
length S), so forwards can be grouped into block-start refreshes and window forwards.
Forwards replayed from CUDA graphs (``GenerationConfig.cuda_graphs``) run no module hooks; they
are timed through the model's graph runner's replay hooks instead (``dllm.runner.graphs``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class ForwardRecord:
    rows: int  # N: batch rows (candidate states count as rows)
    queries: int  # T: query positions
    keys: int  # S: key positions attended (the cache length when cached, else T)
    seconds: float


class ForwardTimer:
    """``with ForwardTimer(model) as timer: decode(...)`` then ``timer.records()``."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.cuda = self.device.type == "cuda"
        self._open: list = []  # (rows, queries, keys, start event | time)
        self._done: list = []
        self._handles: list = []
        self._replays: list | None = None  # the graph runner's replay hooks, while timing

    def __enter__(self) -> "ForwardTimer":
        # the hooks run eagerly, never traced: inside a compiled forward (GenerationConfig.compile)
        # torch.compile would otherwise trace them, and on CUDA their events were never recorded
        before, after = torch.compiler.disable(self._before), torch.compiler.disable(self._after)
        self._handles = [self.model.register_forward_pre_hook(before, with_kwargs=True),
                         self.model.register_forward_hook(after, with_kwargs=True)]
        self._replays = self._graph_hooks()
        if self._replays is not None:
            self._replays.append(self._replay)
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._replays is not None:
            self._replays.remove(self._replay)
            self._replays = None

    def _graph_hooks(self) -> list | None:
        """The replay hooks of the model's graph runner, where graphs can run (CUDA, or the
        tests' emulated capture backend); else None."""
        from dllm.runner import graphs

        if graphs.BACKEND is graphs.CudaGraph and graphs.graphs_available(self.device):
            return None
        return graphs.graph_runner(self.model).replay_hooks

    def _replay(self, rows: int, queries: int, keys: int):
        """Around one graph replay: its start now, its end when the returned callable runs."""
        start = self._stamp()
        return lambda: self._done.append((rows, queries, keys, start, self._stamp()))

    def _stamp(self):
        if self.cuda:  # on the model's device's stream: the current device may be another GPU
            event = torch.cuda.Event(enable_timing=True)
            event.record(torch.cuda.current_stream(self.device))
            return event
        return time.perf_counter()

    def _before(self, module, args, kwargs) -> None:
        input_ids = args[0] if args else kwargs["input_ids"]
        cache = args[3] if len(args) > 3 else kwargs.get("cache")
        rows, queries = input_ids.shape
        keys = cache.layers[0][0].shape[2] if cache is not None else queries
        self._open.append((rows, queries, keys, self._stamp()))

    def _after(self, module, args, kwargs, output) -> None:
        rows, queries, keys, start = self._open.pop()
        self._done.append((rows, queries, keys, start, self._stamp()))

    def records(self) -> list[ForwardRecord]:
        """Every forward so far (synchronises CUDA once, after the work being timed)."""
        if self.cuda:
            torch.cuda.synchronize(self.device)
        out = []
        for rows, queries, keys, start, end in self._done:
            seconds = start.elapsed_time(end) / 1000.0 if self.cuda else end - start
            out.append(ForwardRecord(rows, queries, keys, seconds))
        return out

    def reset(self) -> None:
        self._open, self._done = [], []
