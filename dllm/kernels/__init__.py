"""Kernels for the per-step work, each with a torch reference, behind one dispatch point.

``DLLM_KERNELS`` picks the implementation (read at every call):

* ``auto`` (default): the Triton kernel for CUDA tensors when triton imports, the torch
  reference otherwise.
* ``torch``: always the reference.
* ``triton``: always the kernel. On CPU tensors this needs ``TRITON_INTERPRET=1`` set before
  dllm is imported (the Triton interpreter then runs the kernel); never a silent fallback, it
  raises when triton is missing or the interpreter is off.

``CALL_COUNTS`` counts calls per kernel (``"confidence_stats"``, ``"shard_stats"``, ...) and per
kernel and backend (``"confidence_stats:triton"``, ``"grouped_matmul:torch"``, ...), so tests can
check which ran. Calls traced by ``torch.compile`` (``GenerationConfig.compile``) are not counted:
dynamo would guard on the count's value and recompile the forward at every call.
"""
from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Iterator
from functools import partial

import torch
from torch import Tensor

from dllm.kernels import confidence_stats as _cs
from dllm.kernels import grouped_matmul as _gm
from dllm.kernels import invariant_attention as _ia
from dllm.kernels import invariant_matmul as _im
from dllm.kernels import log_softmax as _ls
from dllm.kernels import rms_norm as _rn
from dllm.kernels import shard_stats as _ss
from dllm.kernels.confidence_stats import StatsScratch, TokenStats, confidence_stats_torch
from dllm.kernels.grouped_matmul import grouped_matmul_torch

CALL_COUNTS: Counter = Counter()
BACKENDS = ("auto", "torch", "triton")


def _device_type(device) -> str:
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if isinstance(device, Tensor):
        return device.device.type
    return torch.device(device).type


def kernel_backend(device=None) -> str:
    """``"triton"`` or ``"torch"``: what the kernels run for tensors on ``device``
    (a device, its type string or a tensor; default: CUDA when available, else CPU).

    Raises when ``DLLM_KERNELS`` is invalid or forces triton where it cannot run.
    """
    choice = os.environ.get("DLLM_KERNELS", "auto").strip().lower() or "auto"
    if choice not in BACKENDS:
        raise ValueError(f"DLLM_KERNELS={choice!r}; use one of {BACKENDS}")
    dev = _device_type(device)
    if choice == "torch":
        return "torch"
    if choice == "triton":
        if not _cs.triton_available():
            raise RuntimeError("DLLM_KERNELS=triton but triton is not importable; pip install triton, "
                               "or set DLLM_KERNELS=torch (or auto)")
        if dev != "cuda" and not _cs.triton_interpreted():
            raise RuntimeError(f"DLLM_KERNELS=triton on {dev} tensors needs the Triton interpreter: set "
                               "TRITON_INTERPRET=1 before importing dllm, or set DLLM_KERNELS=torch (or auto)")
        return "triton"
    return "triton" if dev == "cuda" and _cs.triton_available() else "torch"


@contextlib.contextmanager
def kernels_set_to(choice: str) -> Iterator[None]:
    """While inside, ``DLLM_KERNELS`` is ``choice`` (one of ``BACKENDS``); after, the caller's
    value again, or unset when it was (a bench timing the torch path beside the kernels leaves
    a user's ``DLLM_KERNELS=triton`` as it was)."""
    if choice not in BACKENDS:
        raise ValueError(f"kernels_set_to({choice!r}); use one of {BACKENDS}")
    before = os.environ.get("DLLM_KERNELS")
    os.environ["DLLM_KERNELS"] = choice
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("DLLM_KERNELS", None)
        else:
            os.environ["DLLM_KERNELS"] = before


def on_device(device: torch.device):
    """Where a Triton launch must run: Triton launches on the current CUDA device and its current
    stream, not the tensors' device, so a model on cuda:1 with cuda:0 current would have its
    kernels refused ("Pointer argument cannot be accessed from Triton") or run unordered with
    torch's work on cuda:1's stream."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def confidence_stats(logits: Tensor, *, scratch: StatsScratch | None = None, **kwargs) -> TokenStats:
    """Per-row statistics of (R, V) logits through the selected backend.

    Keyword arguments and the returned fields are those of ``confidence_stats_torch``
    (temperature, seed, offset, counter, excluded_ids); ``scratch`` (the torch path's reused
    work buffers) is ignored by the Triton kernel, which needs none.
    """
    backend = kernel_backend(logits.device)
    _count("confidence_stats", backend)
    if backend == "triton":
        with on_device(logits.device):
            return _cs.confidence_stats_triton(logits, **kwargs)
    return _cs.confidence_stats_torch(logits, scratch=scratch, **kwargs)


def shard_stats(logits: Tensor, **kwargs) -> Tensor:
    """(R, V_r) vocabulary-shard logits -> (R, 8) partial statistics through the selected backend
    (keyword arguments those of ``dllm.kernels.shard_stats.shard_stats_torch``)."""
    backend = kernel_backend(logits.device)
    _count("shard_stats", backend)
    if backend == "triton":
        with on_device(logits.device):
            return _ss.shard_stats_triton(logits, **kwargs)
    return _ss.shard_stats_torch(logits, **kwargs)


def combine_shard_stats(parts: Tensor) -> TokenStats:
    """(ranks, R, 8) gathered partials -> the TokenStats of the whole vocabulary
    (``dllm.kernels.shard_stats.combine_shard_stats_torch``)."""
    _count("combine_shard_stats", "torch")
    return _ss.combine_shard_stats_torch(parts)


def grouped_matmul(x: Tensor, w: Tensor, offsets: Tensor, *, row_tile: int | None = None) -> Tensor:
    """Expert-grouped product through the selected backend: rows of x (N, K) sorted by expert,
    w (E, N_out, K) one nn.Linear weight per expert, offsets (E + 1,) int the experts' row
    bounds -> y (N, N_out), ``y[rows of e] = x[rows of e] @ w[e].T``
    (see ``dllm.kernels.grouped_matmul``). The Triton kernel is one launch for all experts;
    ``row_tile`` pins its row tile (batch-invariant mode), else it follows the rows per expert."""
    backend = kernel_backend(x.device)
    _count("grouped_matmul", backend)
    if backend == "triton":
        with on_device(x.device):
            return _gm.grouped_matmul_triton(x, w, offsets, block_m=row_tile)
    if torch.compiler.is_compiling():  # the reference reads the offsets on the host: an opaque op
        return _gm.grouped_matmul_op(x, w, offsets)
    return _gm.grouped_matmul_torch(x, w, offsets)


def _count(name: str, backend: str) -> None:
    """Count a call of kernel ``name`` and of its backend (not while torch.compile traces)."""
    if not torch.compiler.is_compiling():
        CALL_COUNTS[name] += 1
        CALL_COUNTS[f"{name}:{backend}"] += 1


def _dispatch(name: str, device, triton_fn, torch_fn, *args):
    """Count the call under ``name`` and its backend, then run that backend's function."""
    backend = kernel_backend(device)
    _count(name, backend)
    if backend != "triton":
        return torch_fn(*args)
    with on_device(torch.device(device)):
        return triton_fn(*args)


def invariant_linear(x: Tensor, w: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ w.T + bias`` with a fixed tile and K order whatever the row count, through the
    selected backend (``dllm.kernels.invariant_matmul``)."""
    return _dispatch("invariant_linear", x.device, _im.invariant_linear_triton, _im.invariant_linear_torch,
                     x, w, bias)


def invariant_attention(q: Tensor, k: Tensor, v: Tensor, valid: Tensor | None, key_end: int, *,
                        scale: float | None = None, positions: _ia.Positions | None = None) -> Tensor:
    """Attention of q (B, H, T, D) over keys [0, key_end) of k, v (B, H_kv, S, D) with per-row
    key validity (and optionally a causal / sliding rule by ``positions``) -> (B, T, H, D), keys
    walked in a fixed order from each row's first valid key, softmax ``scale`` (default
    1 / sqrt(D)), through the selected backend (``dllm.kernels.invariant_attention``)."""
    options = {"scale": scale, "positions": positions}
    return _dispatch("invariant_attention", q.device, partial(_ia.invariant_attention_triton, **options),
                     partial(_ia.invariant_attention_torch, **options), q, k, v, valid, key_end)


def rms_norm(x: Tensor, weight: Tensor | None, eps: float, *, cast_last: bool = False) -> Tensor:
    """RMSNorm of x (..., D), one fixed reduction order a row, through the selected backend
    (``dllm.kernels.rms_norm``); ``cast_last``: Gemma's order (the weight in float32, one cast);
    ``weight=None``: no weight."""
    return _dispatch("rms_norm", x.device, partial(_rn.rms_norm_triton, cast_last=cast_last),
                     partial(_rn.rms_norm_torch, cast_last=cast_last), x, weight, eps)


def log_softmax(x: Tensor) -> Tensor:
    """float32 log-probabilities of x (..., V), one fixed reduction order a row, through the
    selected backend (``dllm.kernels.log_softmax``)."""
    return _dispatch("log_softmax", x.device, _ls.log_softmax_triton, _ls.log_softmax_torch, x)


__all__ = ["BACKENDS", "CALL_COUNTS", "StatsScratch", "TokenStats", "combine_shard_stats", "confidence_stats",
           "confidence_stats_torch", "grouped_matmul", "grouped_matmul_torch", "invariant_attention",
           "invariant_linear", "kernel_backend", "kernels_set_to",
           "log_softmax", "rms_norm", "shard_stats"]
