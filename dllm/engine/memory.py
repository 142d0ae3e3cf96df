"""Memory plan of one decode, checked against a budget before any model work.

The plan is an upper bound, from shapes alone, of what a decode holds at its peak: the
weights, the KV-cache buffers, the logits of the widest forward (its decision window: the LM
head runs on those positions only), that forward's activations
(one layer's working set: hidden states, Q/K/V and RoPE temporaries, the MLP or MoE layer, the
attention's key mask and fused-kernel workspace), the working set of the confidence statistics and the
token tensors. Attention never materialises a (queries x keys) mask or score matrix
(``dllm.models.layers.attend``), so every term is linear in the canvas length. The terms are
summed although some are never alive together, so the bound stays safe whatever order the
allocator frees them in. A canvas that does not fit ``GenerationConfig.memory_budget_mb`` is
refused with an error that names the fix instead of crashing out of memory half-way. Cache
modes report the K/V bytes they really allocated (``peak_bytes``), which the engine returns
next to the plan; ``bench/memory_peak.py`` compares the plan with the measured peak.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from dllm.cache.kv import KVBuffers
from dllm.runner.graphs import bucket
from dllm.engine.config import GenerationConfig
from dllm.kernels import kernel_backend
from dllm.models.layers import expand_heads_under_masks
from dllm.models.moe import MoEMLP
from dllm.models.prepack import PrepackedLinear
from dllm.models.quantize import dequant_workspace_bytes, tensor_bytes
from dllm.samplers import make_stopper, make_strategy

MIB = 1 << 20
FLOAT32 = 4
INT64 = 8
# Workspace of one thread of SDPA's fused CPU kernel: a query tile x key tile score block in
# float32 (and its reduced-precision copy), plus the tile's running max, sum and output.
FLASH_Q_TILE, FLASH_KV_TILE = 256, 512


class MemoryBudgetError(ValueError):
    """The requested canvas does not fit ``memory_budget_mb``."""


@dataclass(frozen=True, slots=True)
class ForwardShape:
    """One kind of forward a decode makes: rows x queries, attending over keys."""

    rows: int
    queries: int
    keys: int
    dense_rule: bool = False  # the key rule as a (queries x keys) mask (block-causal forwards replayed from graphs)


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    model_bytes: int  # parameters and buffers of the model
    kv_cache_bytes: int  # the cache's K/V buffers, candidate copies included (0 without a cache)
    logits_bytes: int  # logits of the widest forward (+ the canvas logits kept for stoppers)
    activation_bytes: int  # one layer's working set in the widest forward
    statistics_bytes: int  # confidence statistics over the widest window (or the answer span)
    state_bytes: int  # canvas and candidate token tensors

    @property
    def total_bytes(self) -> int:
        return (self.model_bytes + self.kv_cache_bytes + self.logits_bytes + self.activation_bytes
                + self.statistics_bytes + self.state_bytes)

    @property
    def decode_bytes(self) -> int:
        """What the decode allocates on top of the loaded model."""
        return self.total_bytes - self.model_bytes

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "total_bytes": self.total_bytes}


def model_bytes(model: torch.nn.Module) -> int:
    """Parameters and buffers (every expert of an MoE layer: its stacked weights are parameters;
    a quantized weight at its stored size, data plus scales), plus the reordered weight copies
    of a prepacked model."""
    tensors = list(model.parameters()) + list(model.buffers())
    packed = sum(m.packed_bytes for m in model.modules() if isinstance(m, PrepackedLinear))
    return sum(tensor_bytes(t) for t in tensors) + packed


def _itemsize(model) -> int:
    return torch.empty((), dtype=model.dtype).element_size()


def adaptive_state_bytes(model, batch: int, length: int) -> int:
    """Bytes the adaptive cache holds beyond K/V: every layer's input and the token ids seen."""
    if model.attention == "block_causal":  # it runs the exact dual path
        return 0
    return batch * length * (model.config.n_layers * model.config.d_model * _itemsize(model) + INT64)


def kv_cache_bytes(model, batch: int, length: int) -> int:
    """Bytes of the K and V buffers of every layer for ``batch`` rows of ``length`` positions (a
    model whose layers differ in K/V shape, DiffusionGemma, says its own)."""
    own = getattr(model, "kv_cache_bytes", None)
    if own is not None:
        return own(batch, length)
    return 2 * model.config.n_layers * math.prod(KVBuffers.shape(model, batch, length)) * _itemsize(model)


def forward_shapes(model, batch: int, canvas_length: int, config: GenerationConfig, strategy) -> list[ForwardShape]:
    """The widest forwards of a decode: the canvas forward (uncached, or a cache refresh) and,
    for strategies with candidate rows, the candidate forward (the window plus one position
    for the logit shift when the cache narrows it to the block, else the canvas)."""
    guided = 2 if config.cfg_scale > 0 else 1
    L = canvas_length
    shapes = [ForwardShape(batch * guided, L, L)]
    if strategy.candidate_rows > 1:
        narrow = config.cache == "dual" or (config.cache != "none" and model.attention == "block_causal")
        queries = min(L, config.window_length + 1) if narrow else L
        shapes.append(ForwardShape(batch * strategy.candidate_rows * guided, queries, L))
    return shapes


def moe_token_bytes(layer: MoEMLP, itemsize: int) -> int:
    """Working set of one MoE layer per token (``MoEMLP.forward``): the router's float32
    scores, selection scores, weights and ids; per routed copy (top_k of them) the widest
    phase of the experts, the gathered input with SiLU(gate), up and their product
    (expert_hidden each; the down output and its unsorted copy are smaller), and the sort
    indices; the float32 combine (accumulator, a slot's float32 copy and its weighted value);
    the shared expert's MLP."""
    c, d = layer.cfg, layer.gate_proj.shape[2]
    router = 3 * c.n_experts * FLOAT32 + c.top_k * (FLOAT32 + INT64)
    routed = c.top_k * (max(d + 3 * c.expert_hidden, 2 * d) * itemsize + 3 * INT64)
    return router + routed + 3 * d * FLOAT32 + (3 * c.shared_hidden + d) * itemsize


def activation_bytes(model, shape: ForwardShape) -> int:
    """Peak working set of one forward of ``shape``: the residual stream and the block input,
    the RoPE tables, the largest of the three phases of a layer (RMSNorm in float32; attention:
    Q/K/V, RoPE temporaries in float32, SDPA output and log-sum-exp, its head-merged copy and
    the projection; the SwiGLU MLP, or the largest MoE layer's routed copies), the per-row key
    mask SDPA converts to float, the fused kernel's per-thread workspace, and (quantized weights)
    the largest weight a linear casts back to the activation dtype."""
    c, e, f = model.config, _itemsize(model), FLOAT32
    H, H_kv, D, d, F = c.n_heads, c.n_kv_heads, c.head_dim, c.d_model, c.mlp_hidden_size
    norm = 4 * d * f
    attention = e * ((H + 2 * H_kv) * D + 2 * H * D + d) + f * (4 * H * D + H)
    mlp = max([e * (3 * F + d)] + [moe_token_bytes(m, e) for m in model.modules() if isinstance(m, MoEMLP)])
    per_token = 2 * d * e + 2 * D * f + max(norm, attention, mlp)
    key_mask = shape.rows * shape.keys * (1 + 1 + f)  # row-selected validity, its negation, float
    if shape.dense_rule or getattr(model, "dense_attention_mask", False):  # (queries x keys) bool masks,
        key_mask = shape.rows * shape.queries * shape.keys * (3 + f)  # SDPA's float copy
    if H_kv < H and expand_heads_under_masks(model.device):  # a masked call's K/V repeated to every head
        key_mask += shape.rows * 2 * H * shape.keys * D * e
    tile = FLASH_Q_TILE * (2 * FLASH_KV_TILE + D + 2) * f
    dequant = dequant_workspace_bytes(model)  # a quantized linear's weight cast back for its GEMM
    return shape.rows * shape.queries * per_token + key_mask + torch.get_num_threads() * tile + dequant


def statistics_bytes(rows: int, vocab: int, config: GenerationConfig, itemsize: int, backend: str) -> int:
    """Working set of ``confidence_stats`` over (rows, vocab) logits of ``itemsize`` bytes: the
    flattened copy of the window's logits, then for the torch reference its float32 copy,
    the excluded-ids fill, log-probabilities, probabilities and the entropy terms, Gumbel
    noise (int64 hashes) at temperature > 0; the Triton kernel streams the logits instead.
    Top-k / top-p filtering (torch, before either) adds a filled copy and a sort."""
    per_entry = itemsize
    if backend == "torch":
        per_entry += (FLOAT32 if itemsize != FLOAT32 else 0) + 5 * FLOAT32
        if config.temperature > 0:
            per_entry += 4 * INT64
    if config.top_k is not None:
        per_entry += FLOAT32
    if config.top_p is not None and config.top_p < 1:
        per_entry += 4 * FLOAT32 + INT64 + 2
    return rows * vocab * per_entry


def plan_memory(model, batch: int, canvas_length: int, config: GenerationConfig, strategy=None,
                backend: str | None = None) -> MemoryPlan:
    """Upper-bound plan of a decode of ``batch`` rows on a canvas of ``canvas_length``.

    The cache holds its buffers plus one row-selected copy for candidate forwards (FreeDave's
    drafts, LoPA's branches: the strategy's ``candidate_rows``; CFG doubles the rows).
    ``strategy`` defaults to the one ``config`` names; ``backend`` (the statistics kernel's,
    "torch" or "triton") to the one ``dllm.kernels`` picks for the model's device."""
    strategy = strategy or make_strategy(config.strategy, config.strategy_args)
    shapes = forward_shapes(model, batch, canvas_length, config, strategy)
    widest_rows = max(s.rows for s in shapes)
    kv = 0
    if config.cache != "none":  # CUDA graphs: the K/V lives in a static slot of the batch's bucket
        kv = kv_cache_bytes(model, bucket(batch) if config.cuda_graphs else batch, canvas_length)
        if widest_rows > batch:  # candidates' row-selected copy (CUDA graphs: a slot of their bucket)
            kv += kv_cache_bytes(model, bucket(widest_rows) if config.cuda_graphs else widest_rows, canvas_length)
        if config.cache == "adaptive":  # each layer's cached input and the tokens they were computed for
            kv += adaptive_state_bytes(model, batch + (widest_rows if widest_rows > batch else 0), canvas_length)
    if getattr(strategy, "kv_window", None) is not None:  # APD's own K/V window: buffers + a row group's copy
        kv = 2 * kv_cache_bytes(model, batch, canvas_length)
    # a tensor-parallel rank's LM head holds its vocabulary shard: logits and statistics are per rank
    V, e = model.lm_head.weight.shape[0], _itemsize(model)
    # the LM head runs on the decision window only; Dream's shifted window may be concatenated
    # into a copy (dllm/cache/block.py), hence two windows
    logits = 2 * widest_rows * config.window_length * V * e
    stats_rows = widest_rows * config.window_length
    head_width = config.window_length
    if getattr(make_stopper(config.stopper, config.stopper_args), "needs_answer_stats", False):
        # the last canvas forward's head covers every answer output, kept for the stopper
        logits += batch * (config.gen_length + 1) * V * e
        stats_rows = max(stats_rows, batch * config.gen_length)
        head_width = config.gen_length + 1
    graph_shapes = []
    if config.cuda_graphs and getattr(model, "uniform_state", False):
        # the denoiser's graphs: a static copy of the encoded prefix at the bucket's rows, and float32
        # static logits and self-conditioning buffers of a canvas (dllm/runner/graphs.py run_denoise)
        kv += kv_cache_bytes(model, bucket(batch), canvas_length)
        logits += 2 * bucket(batch) * config.window_length * V * FLOAT32
    elif config.cuda_graphs:  # the canvas forward replays at the bucket's rows, into a static logits buffer
        canvas = shapes[0]
        graph_shapes = [ForwardShape(bucket(canvas.rows), canvas.queries, canvas.keys,
                                     dense_rule=model.attention == "block_causal")]
        logits += bucket(canvas.rows) * head_width * V * e
        if widest_rows > batch:  # candidate forwards replay too, into their bucket's logits buffer
            logits += bucket(widest_rows) * config.window_length * V * e
    state = INT64 * canvas_length * (4 * batch + 4 * widest_rows)
    return MemoryPlan(model_bytes=model_bytes(model), kv_cache_bytes=kv, logits_bytes=logits,
                      activation_bytes=max(activation_bytes(model, s) for s in shapes + graph_shapes),
                      statistics_bytes=statistics_bytes(stats_rows, V, config, e, backend or kernel_backend(model.device)),
                      state_bytes=state)


def check_memory_budget(plan: MemoryPlan, config: GenerationConfig, batch: int, canvas_length: int) -> None:
    budget = config.memory_budget_mb
    if budget is None or plan.total_bytes <= budget * MIB:
        return
    raise MemoryBudgetError(
        f"a canvas of {batch} rows x {canvas_length} positions needs {plan.total_bytes / MIB:.1f} MiB "
        f"(model {plan.model_bytes / MIB:.1f}, KV cache {plan.kv_cache_bytes / MIB:.1f}, "
        f"logits {plan.logits_bytes / MIB:.1f}, activations {plan.activation_bytes / MIB:.1f}, "
        f"statistics {plan.statistics_bytes / MIB:.1f}, tokens {plan.state_bytes / MIB:.1f}) but "
        f"memory_budget_mb is {budget:g}; use a smaller batch or gen_length, fewer drafts / branches, "
        "or raise memory_budget_mb" + (" (cuda_graphs=True pads the canvas to a captured length and the batch to "
                                       "a captured size; cuda_graphs=False needs less)" if config.cuda_graphs else ""))
