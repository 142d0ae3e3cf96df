"""``load(..., prepack=True)``: a CPU model's linear weights reordered once into oneDNN's layout.

torch's default CPU GEMM for a plain ``nn.Linear`` is slow at the row counts of a decode step (a
32-token window, a few LM-head rows): on an AMD EPYC core the head of a 16k vocabulary runs at
22-31 GFLOP/s for 16-32 rows, and the same GEMM through oneDNN with the weight reordered ahead
of time at 58-71 (``bench/cpu_linear_prepack.py``; the table is in
``bench/results/cpu_linear_prepack.md``). Prepacking does that reorder once, at load, for every
linear of the model.

The result is float rounding away from the unpacked path (another summation order), so it is
opt-in: the default keeps the GEMMs bit for bit those of the reference implementations. What
it keeps is batch invariance: a row's output is the same bits at any row count (checked by
``tests/models/test_prepack.py``), so ragged batches still decode the tokens of batch 1. A torch
whose oneDNN does not keep it on this CPU (2.11 on an AVX2-only one) is refused: a probe at load.

Inference only: the packed copy does not follow later changes to ``weight``, and a forward
that would need gradients is refused. The dense ``weight`` stays (state_dict, tied embeddings
and anything that reads it are unchanged), so the linear weights take twice their memory.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import torch
from torch import Tensor, nn

from dllm.models.layers import LinearTwin

PACKED_DTYPES = (torch.float32, torch.bfloat16)
# Rows oneDNN is told to expect. Measured: with a hint of 8 or more every row count from 2 up
# gives each row the same bits (a hint of 1 picks another kernel for single rows, and so does
# torch 2.11's oneDNN at any hint for some shapes: forward runs a single row as two).
ROWS_HINT = 32


def prepack_unavailable() -> str | None:
    """None when this torch can prepack linears, else why not."""
    if not torch.backends.mkldnn.is_available():
        return f"torch {torch.__version__} was built without oneDNN (mkldnn)"
    ops = ("_linear_pointwise", "_reorder_linear_weight", "_nbytes")
    if not all(hasattr(torch.ops.mkldnn, op) for op in ops):
        return f"torch {torch.__version__} has no oneDNN prepacked linear ops"
    return None


def prepack_refused(dtype: torch.dtype = torch.float32) -> str | None:
    """Why ``load(prepack=True)`` refuses weights of ``dtype`` on this machine whatever else is
    asked (no oneDNN ops, or a row's bits that vary with the row count), or None."""
    return prepack_unavailable() or row_bits_vary(dtype)


# The probe's linears (in, out features) and row counts, each compared with the same rows of a
# PROBE_FULL_ROWS call. Measured: torch 2.11's oneDNN on an AVX2-only CPU runs some rows of a call
# in another kernel, so rows 1-3 and 7-9 of a 512x128 float32 linear differ from those rows of a
# longer call (and every count up to 256 of a 128x1286 one); torch 2.13's keeps every row's bits.
PROBE_SHAPES = ((512, 128), (128, 1286))
PROBE_ROWS = (1, 2, 3, 7, 9, 33)
PROBE_FULL_ROWS = 160


def first_varying_rows(forward: Callable[[Tensor], Tensor], x: Tensor) -> int | None:
    """The first of PROBE_ROWS at which ``forward`` of the first rows of ``x`` differs in a bit
    from those rows of ``forward(x)``, or None when none does."""
    full = forward(x)
    for rows in PROBE_ROWS:
        if not torch.equal(forward(x[:rows]), full[:rows]):
            return rows
    return None


def row_bits_vary(dtype: torch.dtype) -> str | None:
    """Why this torch's oneDNN gives a prepacked row of ``dtype`` other bits at another row count
    (so a ragged batch could decode other tokens than batch 1), or None when the probe finds
    none; measured once per dtype and thread count."""
    return _row_bits_vary(dtype, torch.get_num_threads())


@lru_cache(maxsize=None)
def _row_bits_vary(dtype: torch.dtype, threads: int) -> str | None:
    generator = torch.Generator().manual_seed(0)
    for in_features, out_features in PROBE_SHAPES:
        linear = nn.Linear(in_features, out_features, bias=False, dtype=dtype).requires_grad_(False)
        with torch.no_grad():
            linear.weight.copy_(torch.randn(out_features, in_features, generator=generator))
            x = torch.randn(PROBE_FULL_ROWS, in_features, generator=generator).to(dtype)
            rows = first_varying_rows(PrepackedLinear(linear), x)
        if rows is not None:
            return (f"torch {torch.__version__}'s oneDNN gives the first {rows} row(s) of a {in_features}x"
                    f"{out_features} {str(dtype).removeprefix('torch.')} linear, called alone, other bits than "
                    f"those rows of a {PROBE_FULL_ROWS}-row call on this CPU (torch threads: {threads}), so a "
                    "ragged batch could decode other tokens than batch 1 (torch 2.13's oneDNN keeps them)")
    return None


def is_prepacked(model: nn.Module) -> bool:
    """Whether ``model`` runs prepacked linears (results record it beside the dtype)."""
    return any(isinstance(m, PrepackedLinear) for m in model.modules())


class PrepackedLinear(LinearTwin):
    """An ``nn.Linear`` whose forward uses a oneDNN-reordered copy of its weight."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__(linear)
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), ROWS_HINT)
        self.packed_dtype = linear.weight.dtype  # what the copy holds, whatever .to() does to weight later

    def forward(self, x: Tensor) -> Tensor:
        if torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad):
            raise RuntimeError("a prepacked model is for inference and has no gradients; "
                               "load it without prepack=True to train or to take gradients")
        if x.device.type != "cpu" or x.dtype != self.packed_dtype or self.weight.dtype != self.packed_dtype:
            raise RuntimeError(f"prepacked weights are {self.packed_dtype} on the CPU, got input {x.dtype} on "
                               f"{x.device}; load the model again (with the dtype and device wanted) to move "
                               "or cast it")
        bias = None if self.bias is None else self.bias.detach()
        rows = x.reshape(-1, self.in_features)
        # one row goes in twice: oneDNN may pick another kernel for a single row whatever the hint
        # (torch 2.11's did for a 512x128 float32 weight), and that row's bits would then differ
        single = rows.shape[0] == 1
        out = torch.ops.mkldnn._linear_pointwise(rows.repeat(2, 1) if single else rows, self.packed, bias,
                                                 "none", [], "")
        return out[: rows.shape[0]].view(*x.shape[:-1], self.out_features)

    @property
    def packed_bytes(self) -> int:
        """Memory of the reordered copy, padding of oneDNN's blocked layout included (the memory
        plan counts it on top of the parameters)."""
        return torch.ops.mkldnn._nbytes(self.packed)


def check_prepack(device: torch.device, dtype: torch.dtype) -> None:
    """Refuse, naming the fix, weights that prepacking cannot take (checked before loading)."""
    reason = prepack_unavailable()
    if reason is not None:
        raise ValueError(f"prepack=True: {reason}; load with prepack=False")
    if device.type != "cpu":
        raise ValueError(f"prepack=True is for models on the CPU, and the device is {device}; "
                         "leave prepack off there")
    if dtype not in PACKED_DTYPES:
        raise ValueError(f"prepack=True takes float32 or bfloat16 weights, not {dtype}; "
                         "pass dtype='float32' or 'bfloat16', or leave prepack off")
    if dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        raise ValueError("prepack=True with bfloat16 needs a CPU with oneDNN bfloat16 support, which this one "
                         "lacks; pass dtype='float32' or leave prepack off")
    varies = row_bits_vary(dtype)  # last: the caller's own mistakes are named first
    if varies is not None:
        raise ValueError(f"prepack=True: {varies}; load with prepack=False")


def prepack_linears(model: nn.Module) -> int:
    """Replace every ``nn.Linear`` of a CPU float32 / bfloat16 model by a ``PrepackedLinear``
    (in place); returns how many."""
    linears = [(parent, name, child) for parent in model.modules()
               for name, child in parent.named_children() if isinstance(child, nn.Linear)]
    for device, dtype in {(linear.weight.device, linear.weight.dtype) for _, _, linear in linears}:
        check_prepack(device, dtype)
    for parent, name, linear in linears:
        setattr(parent, name, PrepackedLinear(linear))
    return len(linears)
