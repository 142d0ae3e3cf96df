"""Count the operations that make the host wait for the device, on any device.

On a GPU each of these blocks the Python thread until the queued kernels have run: a value read
back (``.item()``, ``bool(t)``, ``int(t)``, ``.tolist()``, ...) or an op whose output size
depends on the data (``nonzero``, boolean-mask indexing, ``bincount``, ``unique``, ...). The
counter is a TorchFunctionMode, so it sees them on CPU tensors too and a CPU test can hold the
decode loop to a budget.
"""
from __future__ import annotations

from collections import Counter

import torch
from torch.overrides import TorchFunctionMode

READS = {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "__len__"}
DATA_DEPENDENT = {"nonzero", "argwhere", "masked_select", "bincount", "unique", "unique_consecutive",
                  "repeat_interleave", "nonzero_static"}


def _bool_index(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


class HostSyncCounter(TorchFunctionMode):
    """``with HostSyncCounter() as syncs: ...`` then ``syncs.total`` / ``syncs.by_name``."""

    def __init__(self) -> None:
        super().__init__()
        self.by_name: Counter = Counter()
        self.paused = 0

    @property
    def total(self) -> int:
        return sum(self.by_name.values())

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in READS and args and isinstance(args[0], torch.Tensor):
            self.by_name[name] += 1
        elif name in DATA_DEPENDENT and not (name == "repeat_interleave" and isinstance(args[1] if len(args) > 1 else kwargs.get("repeats"), int)):
            self.by_name[name] += 1
        elif name in ("__getitem__", "__setitem__") and len(args) > 1 and _bool_index(args[1]):
            self.by_name[f"{name}[bool]"] += 1
        return func(*args, **kwargs)
