"""Count the engine's own tensor ops: every ATen op dispatched outside the model's forward.

On a GPU each such op is a kernel launch (a few microseconds of host time each), so the count per
decode round is the engine's fixed cost next to a replayed forward; on a CPU it is dispatch and
small-tensor work. Views (slices, reshapes, aliases: no data moved, no kernel) are counted apart.
The model's forward is found by module hooks, as ``dllm.bench.forward_timer`` times it, so the
engine is not changed; each op is charged to the innermost ``dllm`` function that issued it.
"""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import dllm

_PACKAGE = str(Path(dllm.__file__).parent)
_HERE = str(Path(__file__))


def _storages(tree) -> set[int]:
    leaves = tree if isinstance(tree, (list, tuple)) else [tree]
    return {t.untyped_storage().data_ptr() for t in leaves if isinstance(t, torch.Tensor) and t.numel()}


def _site() -> str:
    """``file.py:function`` of the innermost frame in the dllm package (not this file)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_PACKAGE) and name != _HERE:
            return f"{Path(name).relative_to(_PACKAGE).as_posix()}:{frame.f_code.co_name}"
        frame = frame.f_back
    return "?"


class EngineOpCounter(TorchDispatchMode):
    """``with EngineOpCounter(model) as ops: decoding.step()`` then ``ops.kernels`` / ``ops.views``
    (totals) and ``ops.by_site`` ((site, "op" | "view", aten name) -> count; ``sites=True`` only)."""

    def __init__(self, model: torch.nn.Module, sites: bool = False) -> None:
        super().__init__()
        self.model, self.sites = model, sites
        self.kernels = self.views = 0
        self.by_site: Counter = Counter()
        self._depth = 0  # > 0 inside the model's forward
        self._handles: list = []

    def __enter__(self) -> "EngineOpCounter":
        self._handles = [self.model.register_forward_pre_hook(self._enter_forward),
                         self.model.register_forward_hook(self._leave_forward)]
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        super().__exit__(*exc)

    def _enter_forward(self, *args) -> None:
        self._depth += 1

    def _leave_forward(self, *args) -> None:
        self._depth -= 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self._depth:
            return out
        # a view shares its input's storage (``to`` / ``contiguous`` may alias or copy)
        view = func.overloadpacket is torch.ops.aten.lift_fresh or (
            func.is_view and bool(_storages(out) & _storages(list(args))))
        if view:
            self.views += 1
        else:
            self.kernels += 1
        if self.sites:
            self.by_site[(_site(), "view" if view else "op", func.overloadpacket.__name__)] += 1
        return out
