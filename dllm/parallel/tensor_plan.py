"""Tensor and expert parallelism: the plan, the group and its collectives.

Sharding is a load-time transform of the same modules. ``PLAN`` says, per module-tensor name
pattern, how a tensor is split over the ``size`` ranks of a tensor-parallel group:

* ``columns``: the output features (dim 0 of an ``nn.Linear`` weight, and its bias): q/k/v
  projections by heads, SwiGLU gate/up by hidden units. No collective: each rank keeps its part.
* ``kv_columns``: k/v projections by K/V heads; where there are fewer K/V heads than ranks each
  rank holds the one K/V head its query heads use (replicated over ``size / n_kv_heads`` ranks).
* ``rows``: the input features (dim 1): o_proj and SwiGLU down. The products are partial sums:
  one all-reduce after the projection (the bias is read by rank 0 only, zeros elsewhere).
* ``vocab``: the embedding and the LM head by vocabulary rows; the embedding is a masked lookup
  plus an all-reduce, the LM head returns the rank's shard of the logits (the per-step statistics
  combine partial statistics, ``dllm.kernels.shard_stats``; the full logits are never gathered).
* ``experts``: stacked MoE expert weights (E, ...) by experts (expert parallelism): a rank holds
  E / size experts, routes every token with the replicated router, computes its experts'
  contributions (and its columns of the shared expert) and one all-reduce sums them.
* ``replicated``: norms, the router and its selection bias.

DiffusionGemma (its own module, ``dllm.models.gemma``) has its own plan, ``GEMMA_PLAN``: the
same splits of attention (K/V by each layer's own K/V heads and head size: sliding and full
layers differ; full layers have no v_proj), of the dense GeGLU and of the experts, but the
vocabulary is not split: the embedding, the tied LM head and the self-conditioning block (which
reads the whole softmax times the embedding matrix) are replicated, so every rank has whole
logit rows, which the uniform strategy samples, re-noises and self-conditions on.

``check_plan`` refuses a size that does not divide the heads, K/V heads (or is not a multiple of
them), the MLP hidden size, the experts or the vocabulary (DiffusionGemma: each layer kind's K/V
heads; not the vocabulary), before any weight is read.
``local_config`` is the rank's ArchConfig (its heads and MLP hidden size: what its modules,
caches and memory plan hold; the vocabulary and MoE settings stay global: token ids and expert
ids are global). ``read_local`` reads one module tensor's slice for the rank from the
safetensors pieces (``safe_open(...).get_slice``), so no rank ever holds a whole tensor it splits.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.distributed as dist
from torch import Tensor, nn

from dllm.models.sources import Piece, Source

COLUMNS, KV_COLUMNS, ROWS, FIRST_RANK, VOCAB, EXPERTS, REPLICATED = (
    "columns", "kv_columns", "rows", "first_rank", "vocab", "experts", "replicated")

# module-tensor name pattern -> how it is split (first match wins; names are DiffusionTransformer's)
PLAN: tuple[tuple[str, str], ...] = (
    (r"embed\.weight", VOCAB),
    (r"lm_head\.weight", VOCAB),
    (r"layers\.\d+\.attn\.q_proj\.(weight|bias)", COLUMNS),
    (r"layers\.\d+\.attn\.[kv]_proj\.(weight|bias)", KV_COLUMNS),
    (r"layers\.\d+\.attn\.o_proj\.weight", ROWS),
    (r"layers\.\d+\.attn\.o_proj\.bias", FIRST_RANK),
    (r"layers\.\d+\.mlp\.(shared\.)?(gate|up)_proj\.weight", COLUMNS),
    (r"layers\.\d+\.mlp\.(shared\.)?down_proj\.weight", ROWS),
    (r"layers\.\d+\.mlp\.(gate|up|down)_proj", EXPERTS),
    (r".*norm\.weight", REPLICATED),
    (r"layers\.\d+\.mlp\.(router\.weight|expert_bias)", REPLICATED),
)


# DiffusionGemma's module names (``dllm.models.gemma``); the vocabulary stays whole (module docstring)
GEMMA_PLAN: tuple[tuple[str, str], ...] = (
    (r"(embed|lm_head)\.weight", REPLICATED),
    (r"self_conditioning\.\w+\.weight", REPLICATED),
    (r"layers\.\d+\.self_attn\.q_proj\.weight", COLUMNS),
    (r"layers\.\d+\.self_attn\.[kv]_proj\.weight", KV_COLUMNS),
    (r"layers\.\d+\.self_attn\.o_proj\.weight", ROWS),
    (r"layers\.\d+\.mlp\.(gate|up)_proj\.weight", COLUMNS),
    (r"layers\.\d+\.mlp\.down_proj\.weight", ROWS),
    (r"layers\.\d+\.moe\.(gate|up|down)_proj", EXPERTS),
    (r"layers\.\d+\.moe\.(router\.weight|expert_scale)", REPLICATED),
    (r"layers\.\d+\.(router_scale|layer_scalar|encoder_layer_scalar)", REPLICATED),
    (r".*(norm|layernorm_\d)\.weight", REPLICATED),
)


def plan_of(cfg) -> tuple[tuple[str, str], ...]:
    """The plan of the module a config builds: DiffusionGemma's own, else DiffusionTransformer's."""
    return GEMMA_PLAN if getattr(cfg, "family", None) == "diffusion_gemma" else PLAN


def split_of(name: str, plan: tuple[tuple[str, str], ...] = PLAN) -> str:
    """How the module tensor ``name`` is split (a name no rule covers is an error, not replicated)."""
    for pattern, kind in plan:
        if re.fullmatch(pattern, name):
            return kind
    raise ValueError(f"the tensor-parallel plan has no rule for {name!r}; add one to dllm/parallel/tensor_plan.py")


class TensorPlanError(ValueError):
    """A tensor-parallel size the model's shapes do not allow (raised before any weight is read)."""


def check_plan(cfg, size: int) -> None:
    """Refuse ``size`` unless it divides every split dimension of ``cfg`` (an ArchConfig)."""
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise TensorPlanError(f"tensor_parallel must be a positive int, got {size!r}")
    if size == 1:
        return
    gemma = plan_of(cfg) is GEMMA_PLAN
    problems = []
    if cfg.n_heads % size:
        problems.append(f"{cfg.n_heads} attention heads")
    for kv, where in _kv_counts(cfg):
        if (kv >= size and kv % size) or (kv < size and size % kv):
            problems.append(f"{kv} K/V heads{where} (the size must divide them, or be a multiple of them to "
                            "replicate them)")
    dense = gemma or any(i not in cfg.moe_layers for i in range(cfg.n_layers))  # Gemma: every layer has both
    if dense and cfg.mlp_hidden_size % size:
        problems.append(f"MLP hidden size {cfg.mlp_hidden_size}")
    if cfg.moe is not None:
        if cfg.moe.n_experts % size:
            problems.append(f"{cfg.moe.n_experts} experts")
        if cfg.moe.shared_hidden % size:
            problems.append(f"shared-expert hidden size {cfg.moe.shared_hidden}")
    if not gemma and cfg.vocab_size % size:  # DiffusionGemma's vocabulary is replicated
        problems.append(f"vocabulary of {cfg.vocab_size}")
    if problems:
        raise TensorPlanError(f"tensor_parallel={size} does not divide this {cfg.family} model's "
                              + ", ".join(problems) + "; pick a size that does")


def _kv_counts(cfg) -> list[tuple[int, str]]:
    """(K/V heads, where) of each kind of layer: one count, or DiffusionGemma's sliding and full."""
    if plan_of(cfg) is not GEMMA_PLAN:
        return [(cfg.n_kv_heads, "")]
    kinds = {"sliding": cfg.n_kv_heads, "full": cfg.global_kv_heads}
    present = {"sliding" if cfg.is_sliding(i) else "full" for i in range(cfg.n_layers)}
    return [(kv, f" of the {kind}-attention layers") for kind, kv in kinds.items() if kind in present]


def _kv_layout(cfg, name: str) -> tuple[int, int]:
    """(head size, K/V heads) of the layer module tensor ``name`` belongs to (DiffusionGemma's
    sliding and full layers differ; ``layer_heads``)."""
    layer_heads = getattr(cfg, "layer_heads", None)
    if layer_heads is None:
        return cfg.head_dim, cfg.n_kv_heads
    return layer_heads(int(re.match(r"layers\.(\d+)\.", name).group(1)))


def local_config(cfg, size: int):
    """The ArchConfig of one rank's modules: heads, K/V heads and MLP hidden size divided."""
    if size == 1:
        return cfg
    return dataclasses.replace(cfg, n_heads=cfg.n_heads // size, n_kv_heads=max(cfg.n_kv_heads // size, 1),
                               mlp_hidden_size=cfg.mlp_hidden_size // size if cfg.mlp_hidden_size % size == 0
                               else cfg.mlp_hidden_size)


@dataclass(eq=False)
class TensorShard:
    """One rank's place in a tensor-parallel group, and the group's collectives.

    The modules hold one (``model.tensor_parallel``); with it a row-split projection all-reduces
    its output, the embedding looks up its vocabulary rows, MoE layers compute their experts.
    ``bytes_reduced`` / ``bytes_gathered`` count what this rank sent into collectives (payload
    bytes, as ``numel * itemsize``), ``reduces`` / ``gathers`` the calls.

    ``fixed_order`` (set by ``load(batch_invariant=True)``, issue 39): every sum all-reduce is an
    all-gather of the ranks' parts added in rank order (``rank_order_sum``), so each element's bits
    depend on its own parts only. A collective library's sum need not: gloo's ring splits a
    tensor into chunks by its size and starts each chunk's sum at another rank, NCCL picks its
    algorithm and chunks by size too, so a row's sum can round differently alone and in a larger
    batch (from 3 ranks on; two parts add alike in either order). MAX reductions are exact and
    keep the library's all-reduce. The price: each rank receives size - 1 whole parts instead of
    a ring's 2 (size - 1) / size."""

    rank: int
    size: int
    group: object = None  # a torch.distributed process group; None = the default (whole world)
    fixed_order: bool = False
    bytes_reduced: int = 0
    bytes_gathered: int = 0
    reduces: int = 0
    gathers: int = 0
    log: list = field(default_factory=list, repr=False)  # (kind, shape) per collective when enabled
    record: bool = False

    def part(self, n: int) -> int:
        return n // self.size

    def vocab_range(self, vocab: int) -> tuple[int, int]:
        n = vocab // self.size
        return self.rank * n, (self.rank + 1) * n

    def expert_range(self, n_experts: int) -> tuple[int, int]:
        n = n_experts // self.size
        return self.rank * n, (self.rank + 1) * n

    def kv_head_range(self, n_kv: int) -> tuple[int, int]:
        """The K/V heads this rank holds: its share, or the one its query heads read."""
        if n_kv >= self.size:
            n = n_kv // self.size
            return self.rank * n, (self.rank + 1) * n
        h = self.rank // (self.size // n_kv)
        return h, h + 1

    # --- collectives ----------------------------------------------------------------------
    def all_reduce(self, x: Tensor, op=None) -> Tensor:
        """Sum (or ``op``) over the group, in place; returns x. A sum under ``fixed_order`` is
        ``rank_order_sum`` of the gathered parts, whatever the shape."""
        x = x.contiguous()
        if self.fixed_order and op in (None, dist.ReduceOp.SUM):
            parts = [torch.empty_like(x) for _ in range(self.size)]
            dist.all_gather(parts, x, group=self.group)
            x.copy_(rank_order_sum(parts))
        else:
            dist.all_reduce(x, op=dist.ReduceOp.SUM if op is None else op, group=self.group)
        self.reduces += 1
        self.bytes_reduced += x.numel() * x.element_size()
        if self.record:
            self.log.append(("all_reduce", tuple(x.shape), x.element_size()))
        return x

    def all_gather(self, x: Tensor) -> Tensor:
        """(size, *x.shape): every rank's x, in rank order."""
        x = x.contiguous()
        parts = [torch.empty_like(x) for _ in range(self.size)]
        dist.all_gather(parts, x, group=self.group)
        self.gathers += 1
        self.bytes_gathered += x.numel() * x.element_size()
        if self.record:
            self.log.append(("all_gather", tuple(x.shape), x.element_size()))
        return torch.stack(parts)

    def embed(self, embedding: nn.Embedding, ids: Tensor) -> Tensor:
        """Vocabulary-split lookup: rows outside this rank's shard read zeros; the sum over ranks
        is each id's one row (adding zeros is exact, so the result equals one process's)."""
        lo = self.rank * embedding.num_embeddings
        local = ids - lo
        outside = (local < 0) | (local >= embedding.num_embeddings)
        x = embedding(local.masked_fill(outside, 0))
        return self.all_reduce(x.masked_fill(outside[..., None], 0.0))

    def statistics(self, logits: Tensor, *, vocab: int, temperature: float = 0.0, excluded_ids: Tensor | None = None,
                   seed=None, counter: Tensor | None = None, offset: int = 0):
        """TokenStats of (R, V / size) shard logits equal to one process's over the whole (R, V):
        each rank's partial statistics (8 floats a row) are all-gathered and combined; at
        temperature > 0 the rows' global max is all-reduced first, so each shard forms the
        noised scores exactly as one process does (noise keyed by the global vocabulary id)."""
        from dllm.kernels import combine_shard_stats, shard_stats

        lo, _ = self.vocab_range(vocab)
        shift = None
        if temperature > 0:
            local = logits.float()
            if excluded_ids is not None:
                ex = excluded_ids.to(logits.device).reshape(-1) - lo
                ex = ex[(ex >= 0) & (ex < logits.shape[1])]
                local = local.index_fill(1, ex, float("-inf")) if ex.numel() else local
            shift = self.all_reduce(local.amax(-1), op=dist.ReduceOp.MAX)
        partial = shard_stats(logits, vocab_start=lo, temperature=temperature, excluded_ids=excluded_ids,
                              seed=seed, counter=counter, offset=offset, global_max=shift)
        return combine_shard_stats(self.all_gather(partial))

    def filter_logits(self, logits: Tensor, top_k: int | None, top_p: float | None) -> Tensor:
        """This rank's shard of one process's top-k / nucleus filtering of the whole rows, from
        small exchanges (``dllm.parallel.vocab_shard``)."""
        from dllm.parallel.vocab_shard import filter_shard_logits

        return filter_shard_logits(self, logits, top_k, top_p)

    def logprobs(self, logits: Tensor, token: Tensor, top: int) -> tuple[Tensor, Tensor, Tensor]:
        """Log-probabilities of ``token`` (R,) under the whole rows' softmax and the rows' ``top``
        alternatives (logprobs, ids), from (R, V / size) shard logits (``dllm.parallel.vocab_shard``)."""
        from dllm.parallel.vocab_shard import shard_logprobs

        return shard_logprobs(self, logits, token, top)


def rank_order_sum(parts: list[Tensor]) -> Tensor:
    """((parts[0] + parts[1]) + parts[2]) + ...: elementwise adds in rank order, one rounding
    each, so an element's sum never depends on the tensor's shape or its other elements
    (overwrites parts[0])."""
    out = parts[0]
    for part in parts[1:]:
        out.add_(part)
    return out


# ---------------------------------------------------------------------------------------------
# per-rank reads
# ---------------------------------------------------------------------------------------------


def _local_index(kind: str, name: str, full: tuple[int, ...], shard: TensorShard, cfg) -> tuple:
    """(dim, lo, hi) of the module tensor's full shape that this rank holds; dim None: whole."""
    if kind in (REPLICATED, FIRST_RANK):
        return (None, 0, full[0])
    if kind == VOCAB:
        return (0, *shard.vocab_range(full[0]))
    if kind == EXPERTS:
        return (0, *shard.expert_range(full[0]))
    if kind == KV_COLUMNS:
        head_dim, n_kv = _kv_layout(cfg, name)
        h_lo, h_hi = shard.kv_head_range(n_kv)
        return (0, h_lo * head_dim, h_hi * head_dim)
    if kind == COLUMNS:
        n = full[0] // shard.size
        return (0, shard.rank * n, (shard.rank + 1) * n)
    if kind == ROWS:
        n = full[1] // shard.size
        return (1, shard.rank * n, (shard.rank + 1) * n)
    raise ValueError(f"unknown split {kind!r} for {name}")


ReadPiece = Callable[[Piece, tuple[int, int] | None], Tensor]


def read_local(name: str, src: Source, full: tuple[int, ...], shard: TensorShard, cfg,
               ckpt_rows: dict[str, int], read: ReadPiece) -> Tensor:
    """This rank's slice of module tensor ``name`` (full shape ``full``, assembled from ``src``).

    ``read(piece, cols)`` returns the piece (its rows [lo, hi) of a checkpoint tensor, None: all;
    its ``inner`` range of the second dimension, if any) and, ``cols``, only columns [lo, hi);
    ``ckpt_rows`` gives each checkpoint tensor's row count."""
    kind = split_of(name, plan_of(cfg))
    dim, lo, hi = _local_index(kind, name, full, shard, cfg)
    if kind == FIRST_RANK and shard.rank != 0:
        return torch.zeros(0).new_zeros(full)  # dtype / device fixed by the caller's cast
    if src.stack:  # experts: whole pieces e in [lo, hi)
        pieces = src.pieces if dim is None else src.pieces[lo:hi]
        return torch.stack([read(p, None) for p in pieces])
    cols = (lo, hi) if dim == 1 else None
    if dim != 0:
        parts = [read(p, cols) for p in src.pieces]
        return parts[0] if len(parts) == 1 else torch.cat(parts)
    # rows [lo, hi) of the concatenation of the pieces
    parts, at = [], 0
    for p in src.pieces:
        p_lo, p_hi = p.rows if p.rows is not None else (0, ckpt_rows[p.name])
        n = p_hi - p_lo
        a, b = max(lo, at), min(hi, at + n)
        if a < b:  # (an ``inner`` piece keeps its range: DiffusionGemma's fused gate / up experts)
            parts.append(read(dataclasses.replace(p, rows=(p_lo + a - at, p_lo + b - at)), None))
        at += n
    return parts[0] if len(parts) == 1 else torch.cat(parts)


__all__ = ["GEMMA_PLAN", "PLAN", "TensorPlanError", "TensorShard", "check_plan", "local_config",
           "plan_of", "rank_order_sum", "read_local", "split_of", "Piece"]
