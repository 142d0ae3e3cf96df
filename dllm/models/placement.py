"""Where a model's weights go: the torch device and dtype, including ``"auto"`` for both.

``device="auto"``: ``$DLLM_DEVICE`` when set (the test suite sets it from ``DLLM_TEST_DEVICE``),
else CUDA when this torch sees a GPU, else the CPU. ``dtype="auto"``: the checkpoint's own
``torch_dtype`` (``dtype`` in configs written by transformers 5), else bfloat16 on a GPU and
float32 on the CPU. An 8B checkpoint loaded as float32 by default would need 32 GB and run at
half speed, so nothing defaults to float32 where a GPU is in use.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# the dtypes dllm runs, by their torch names; torch is imported by the functions that use it, so
# the CLI's --dtype choices are read without it (``dllm generate --help`` needs no torch)
DTYPES = ("float32", "bfloat16", "float16")
DTYPE_CHOICES = ["auto", *DTYPES]
DTYPE_ALIASES = {"half": "float16", "float": "float32"}  # torch's own names (torch.half), as vLLM and lm-eval take them
DEVICE_ENV = "DLLM_DEVICE"


def auto_device() -> torch.device:
    """What ``device="auto"`` means here: $DLLM_DEVICE, else cuda when available, else cpu."""
    import torch

    chosen = os.environ.get(DEVICE_ENV, "").strip()
    if chosen and chosen != "auto":
        return resolve_device(chosen, source=f"{DEVICE_ENV}={chosen!r}")
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_device(device: str | torch.device, *, source: str | None = None) -> torch.device:
    """A device this torch can use (``"auto"`` resolved), or a clear error before anything is read."""
    import torch

    if isinstance(device, str) and device.strip().lower() == "auto":
        return auto_device()
    named = source or f"device {str(device)!r}"
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"{named} is not a torch device ({err}); use 'auto', 'cpu', 'cuda' or 'cuda:N'") from err
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"{named} asked for, but this torch sees no CUDA device "
                f"(torch {torch.__version__}, CUDA build: {torch.version.cuda is not None}); "
                "use device='cpu' (--device cpu) or 'auto', or install a CUDA build of torch on a machine with a GPU"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"{named} asked for, but only {torch.cuda.device_count()} "
                             "CUDA device(s) are visible; use cuda:0 .. cuda:N-1")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{named} asked for, but MPS is not available here; use device='cpu' (--device cpu)")
    return device


def checkpoint_dtype(raw_config: dict[str, Any]) -> torch.dtype | None:
    """The dtype a config.json declares (``torch_dtype``, or transformers 5's ``dtype``), if any.

    A declared dtype dllm does not run (float64, int8) is an error naming the fix."""
    declared = raw_config.get("torch_dtype", raw_config.get("dtype"))
    if declared is None:
        return None
    name = str(declared).removeprefix("torch.")
    if name not in DTYPES:
        raise ValueError(f"config.json declares torch_dtype={declared!r}, which dllm does not run; "
                         f"pass dtype= one of {list(DTYPES)} instead of 'auto'")
    return _torch_dtype(name)


def resolve_dtype(dtype: str | torch.dtype, *, device: torch.device | None = None,
                  declared: torch.dtype | None = None) -> torch.dtype:
    """A supported torch dtype; ``"auto"`` is ``declared`` (the checkpoint's), else bfloat16
    on a GPU and float32 elsewhere; ``"half"`` / ``"float"`` are float16 / float32."""
    import torch

    if isinstance(dtype, torch.dtype):
        if dtype not in map(_torch_dtype, DTYPES):
            raise ValueError(f"dtype {dtype} is not supported; use one of {DTYPE_CHOICES}")
        return dtype
    if dtype == "auto":
        if declared is not None:
            return declared
        return torch.bfloat16 if device is not None and device.type == "cuda" else torch.float32
    name = DTYPE_ALIASES.get(dtype, dtype) if isinstance(dtype, str) else dtype
    if name not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported; use one of {DTYPE_CHOICES}")
    return _torch_dtype(name)


def _torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of one of ``DTYPES``' names."""
    import torch

    return getattr(torch, name)
