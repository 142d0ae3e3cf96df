"""``GenerationConfig.compile``: the model forward through ``torch.compile``.

Within a decision window every forward has the same shapes (the cache's window, static K/V
buffers written in place), so a compiled forward replays: on CUDA with
``mode="reduce-overhead"`` (CUDA graphs, with the K/V buffers marked as static addresses so
the graphs write them in place), on CPU as a plain inductor compile. Shapes change between
windows (the prefix cache's window shrinks, write offsets move), which compiles a few more
graphs; dynamo then makes those sizes dynamic. Block-causal forwards specialise on their
spans (one tuple of ints per model block in the window) and the pipelined mode's windows vary
more, so the recompile limit is raised to ``RECOMPILE_LIMIT`` for the model's forward (past it
dynamo would run the forward eagerly, with a warning). One compiled wrapper per model, reused
by every decode. Off by default until measured on a GPU.

What is compiled is the model's forward as the runner calls it: every cache's refresh and
window forwards (prefix, dual, sub-blocks, the pipelined mode's append cache, candidate
batches), every family (an MoE layer's CPU expert product is one opaque operator,
``dllm::grouped_matmul_torch``, so the forward stays one graph). On CUDA the experts run the
Triton kernel (no host read); with the torch path there (``DLLM_KERNELS=torch``, or no triton)
the operator's host read cannot be captured, and its ``cudagraph_unsafe`` tag makes inductor split
the CUDA graphs around it (or skip them for that graph) instead of failing
(``tests/kernels/test_grouped_matmul_compile.py``; its CUDA case not yet run on a GPU). The
adaptive cache on a bidirectional model runs its layers itself (``dllm/cache/adaptive.py``,
``read_refresh.py``: per-row choices read on the host), so those forwards stay eager under
``compile=True``; on a block-causal model it is the dual cache's path and compiled.

``DLLM_COMPILE_BACKEND`` picks the torch.compile backend (default ``inductor``); the test suite
uses ``aot_eager`` (the same graph capture and functionalisation of the in-place K/V writes,
without code generation, which takes minutes on a small CPU).
"""
from __future__ import annotations

import importlib
import os
import weakref
from typing import Callable

import torch
from torch.utils.weak import WeakIdKeyDictionary

RECOMPILE_LIMIT = 64
_COMPILED: "weakref.WeakKeyDictionary[torch.nn.Module, Callable]" = weakref.WeakKeyDictionary()
# Buffers already marked, keyed by identity: a WeakSet compares its members with ``==``, which
# for tensors is elementwise ("Boolean value of Tensor with more than one value is ambiguous")
_STATIC: WeakIdKeyDictionary = WeakIdKeyDictionary()


def compile_available() -> str | None:
    """None when torch.compile can run here, else the reason it cannot."""
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile"
    try:
        importlib.import_module("torch._dynamo")
        importlib.import_module("torch._inductor")
    except ImportError as err:
        return f"torch.compile is not usable: {err}"
    return None


def compiled_model(model: torch.nn.Module) -> Callable:
    """The model's compiled forward (built once per model)."""
    reason = compile_available()
    if reason is not None:
        raise RuntimeError(f"compile=True: {reason}; use compile=False")
    compiled = _COMPILED.get(model)
    if compiled is None:
        backend = os.environ.get("DLLM_COMPILE_BACKEND", "inductor")
        mode = compile_mode(model.device, backend)
        compiled = torch.compile(model, backend=backend, mode=mode)
        if mode == "reduce-overhead":
            compiled = _cloned(compiled)
        _COMPILED[model] = compiled
    return compiled


def compile_mode(device: torch.device, backend: str) -> str | None:
    """torch.compile's mode for a model on ``device``: CUDA graphs on CUDA under inductor."""
    return "reduce-overhead" if device.type == "cuda" and backend == "inductor" else None


def _cloned(compiled: Callable) -> Callable:
    """``compiled`` with its output copied out of the CUDA graph's memory: CUDAGraph Trees start
    a new iteration at every call and overwrite (or refuse to read) the previous call's outputs,
    and a caller may hold one forward's logits past the next (the graph runner copies alike)."""
    def call(*args):
        return compiled(*args).clone()

    return call


def mark_static(cache, devices: tuple[str, ...] = ("cuda",)) -> None:
    """Mark a cache's preallocated K/V buffers on ``devices`` (CUDA graphs: the only place it
    matters) as static addresses, each once: the graphs write them in place instead of copying
    them in."""
    for pair in getattr(cache, "layers", ()):
        for buf in pair:
            if buf.device.type in devices and buf not in _STATIC:
                torch._dynamo.mark_static_address(buf)
                _STATIC[buf] = True


def call_compiled(model: torch.nn.Module, *args, **kwargs) -> torch.Tensor:
    """Run the compiled forward; a compiler failure becomes an error that names the fix."""
    try:
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            return compiled_model(model)(*args, **kwargs)
    except torch._dynamo.exc.BackendCompilerFailed as err:
        raise RuntimeError(f"compile=True: torch.compile failed on {model.device.type} ({err}); "
                           "use compile=False") from err
