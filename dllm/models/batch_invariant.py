"""``load(..., batch_invariant=True)``: a row's logits do not depend on the rest of its batch.

On a GPU, cuBLAS and torch's reductions choose tiles, split-K and thread layouts from the tensor
shapes, so the same row rounds differently alone and in a batch (issue 39). This transform swaps
the model's building blocks for kernels whose reduction order is fixed whatever the row count
(``dllm.kernels``): every ``nn.Linear`` (projections, MLPs, router, LM head) becomes an
``InvariantLinear`` (fixed tiles, one K order, no split-K), every ``RMSNorm`` an
``InvariantRMSNorm`` (one program a row), and every ``Attention`` runs
``kernels.invariant_attention`` instead of SDPA (keys walked in fixed chunks from each row's first
valid key, so neither the batch nor left padding moves them). The per-step statistics already run
one Triton program a row on CUDA (``confidence_stats``), and log-probabilities go through
``kernels.log_softmax``. Under tensor parallelism (on every device) the shard's sum all-reduces
add the ranks' parts in rank order (``TensorShard.fixed_order``): a collective library may order
a sum by the tensor's size.

Every ``MoEMLP`` runs its grouped expert product with a pinned row tile (``INVARIANT_ROW_TILE``):
by default the Triton kernel sizes the tile from the rows per expert, and a larger tile can lower
``tl.dot`` to another MMA instruction (Hopper's warpgroup MMA from 64 rows), whose order of a row's
sum is not the smaller one's; a fixed tile is the fixed-configuration rule of batch-invariant
GEMMs. The MoE router's softmax stays torch's (one row per reduction over E experts).

Not covered yet, so not guaranteed bitwise on a GPU: the MoE grouped product with its pinned tile
(row-invariant under the Triton interpreter and across its row tiles,
tests/kernels/test_batch_invariant.py, not yet measured on a GPU) and training's dense-mask
attention. Loading says so with a warning. A family
with layers of its own swaps them itself: ``make_batch_invariant`` calls the model's
``make_batch_invariant()`` when it has one (DiffusionGemma: its norms, attention and
self-conditioning, ``dllm.models.gemma``). The adaptive cache computes its attention-mass
scores row by row under the option (``dllm.cache.read_refresh.row_wise``), and the expert-parallel
MoE combine sums a token's slots in order (no ``index_add_``).

Status: checked on the CPU under the Triton interpreter (each kernel bit for bit in ragged
batches of 2..33 rows; a tiny LLaDA's and Dream's ragged canvas forwards 8 of 8 rows equal to
batch 1 through every kernel, against 1 of 8 without them: ``DLLM_KERNELS=triton TRITON_INTERPRET=1
python -m dllm.bench.batch_invariance``, with ``OPENBLAS_CORETYPE=Sandybridge`` on an AVX2 CPU, where
OpenBLAS's matmul that the interpreter runs ``tl.dot`` with gives a row other bits at another
position of a tile; a tiny DiffusionGemma's encoder and denoiser logits, 3 of 3
ragged rows over two canvases, against 1 of 3 without them: tests/models/test_gemma_batch_invariant.py);
not yet run on a GPU, where the GPU check's
batch-invariance section measures it and its cost.

On the CPU the option is accepted and changes nothing: there the suite checks everywhere that a
row of a ragged batch decodes the tokens of its batch-1 run (the MoE GEMMs are widened to
``MIN_GEMM_ROWS`` rows for it). That is a claim about tokens: a raw forward's logits can still
differ in the last bits between a short row alone and the same row in a batch
(``dllm.bench.batch_invariance`` measures it).
"""
from __future__ import annotations

import logging

import torch
from torch import Tensor, nn

from dllm import kernels
from dllm.models.kernel_version import modules_swapped
from dllm.models.layers import Attention, LinearTwin, RMSNorm
from dllm.models.moe import MoEMLP
from dllm.validation import OptionTypeError

log = logging.getLogger(__name__)
# the MoE grouped product's row tile under the option: the kernel's own choice at decode sizes (up
# to 16 rows an expert), so a batch-1 decode keeps its tiles; below Hopper's 64-row warpgroup MMA
INVARIANT_ROW_TILE = 16
NOT_COVERED = ("the MoE grouped product is not yet measured on a GPU, so a row's logits on CUDA can still move "
               "with its batch there (issue 39)")


class InvariantLinear(LinearTwin):
    """An ``nn.Linear`` whose product runs ``kernels.invariant_linear``; the same Parameters."""

    def forward(self, x: Tensor) -> Tensor:
        return kernels.invariant_linear(x, self.weight, self.bias)


class InvariantRMSNorm(RMSNorm):
    """``RMSNorm`` through ``kernels.rms_norm`` (one program a row); the same weight."""

    def __init__(self, norm: RMSNorm) -> None:
        nn.Module.__init__(self)  # no fresh weight: the norm's own Parameter is kept
        self.weight, self.eps = norm.weight, norm.eps

    def forward(self, x: Tensor) -> Tensor:
        return kernels.rms_norm(x, self.weight, self.eps)


def check_batch_invariant(batch_invariant: object, device: torch.device, *, quantize: str | None = None) -> bool:
    """Validate the option before any weight is read; returns whether modules will be swapped
    (CUDA only). Refuses, naming the fix, what the mode cannot keep invariant. Under tensor
    parallelism ``dllm.load`` also sets the shard's ``fixed_order`` (on every device)."""
    if not isinstance(batch_invariant, bool):
        raise OptionTypeError(f"batch_invariant must be True or False, got {batch_invariant!r}")
    if not batch_invariant:
        return False
    if device.type != "cuda":
        log.info("batch_invariant=True on %s: nothing to replace, the CPU path keeps a row's tokens those of "
                 "batch 1 already (the suite checks it)", device)
        return False
    if quantize is not None:
        raise ValueError(f"batch_invariant=True and quantize={quantize!r} both replace the linears; pick one")
    if kernels.kernel_backend(device) != "triton":
        raise ValueError("batch_invariant=True on CUDA runs Triton kernels, but the kernel backend is torch "
                         "(DLLM_KERNELS=torch, or triton missing); unset DLLM_KERNELS and pip install triton")
    return True


def make_batch_invariant(model: nn.Module) -> dict[str, int]:
    """Swap every ``nn.Linear`` and ``RMSNorm`` of ``model`` (in place) for its batch-invariant
    twin, point every ``Attention`` at ``kernels.invariant_attention``, pin every ``MoEMLP``'s
    grouped-product row tile (``INVARIANT_ROW_TILE``), then let a model with
    layers of its own swap them (its ``make_batch_invariant()``, counts added); returns how many
    of each. Marks ``model.batch_invariant`` (results record it) and raises the model's
    ``kernel_version`` (``dllm.models.kernel_version``: CUDA graphs captured before the swap
    replay the old kernels, and the graph runner checks it)."""
    counts = {"linear": 0, "rms_norm": 0, "attention": 0, "moe": 0}
    for module in model.modules():
        if isinstance(module, Attention):
            module.attention_kernel = kernels.invariant_attention
            counts["attention"] += 1
        elif isinstance(module, MoEMLP):
            module.row_tile = INVARIANT_ROW_TILE
            counts["moe"] += 1
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, InvariantLinear(child))
                counts["linear"] += 1
            elif type(child) is RMSNorm:
                setattr(parent, name, InvariantRMSNorm(child))
                counts["rms_norm"] += 1
    own = getattr(model, "make_batch_invariant", None)  # a family's own layers (DiffusionGemma)
    if own is not None:
        for name, n in own().items():
            counts[name] += n
    model.batch_invariant = True
    modules_swapped(model)
    log.warning("batch_invariant=True: %d linears, %d RMSNorms and %d attentions replaced, %d MoE row tiles "
                "pinned; %s", counts["linear"], counts["rms_norm"], counts["attention"], counts["moe"], NOT_COVERED)
    return counts


__all__ = ["InvariantLinear", "InvariantRMSNorm", "NOT_COVERED", "check_batch_invariant", "make_batch_invariant"]
