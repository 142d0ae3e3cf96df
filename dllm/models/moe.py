"""The mixture-of-experts MLP every MoE family uses: router, top-k, grouped experts, combine.

A family file says which layers are MoE and maps its weight names onto this module; it holds no
routing code. The options cover the official routers:

* LLaDA2.x (``llada2_moe``): sigmoid scores from a float32 router product, a selection-only
  ``expert_bias``, group-limited top-k (groups ranked by the sum of their two best biased
  scores, ``topk_group`` of ``n_group`` kept), weights gathered from the unbiased scores,
  renormalised and scaled by ``routed_scaling_factor``, plus shared experts.
* OLMoE / LLaDA-MoE-7B-A1B: softmax over the experts (router product in the model dtype, softmax
  in float32), top-k, ``norm_topk_prob`` usually false.
* DiffusionGemma: OLMoE's softmax router, renormalised, then each chosen weight times its
  expert's learned ``expert_scale``; GELU (tanh) gates; the router reads its own input (the
  family normalises the residual stream for it) while the experts read another.

Forward: route, sort the (token, slot) pairs by expert (argsort and a scatter-add count, no host
read), gather, one grouped product per projection (``dllm.kernels.grouped_matmul``: one Triton
launch on a GPU, a loop over the experts that received rows on the CPU), SiLU(gate) * up, the
down product, then each token's k expert outputs are put back in slot order and summed in
float32 in that fixed order (as LLaDA2's official combine, which sums in float32), so a
token's result does not depend on the other tokens in the batch. On CPU a call of fewer than
``MIN_GEMM_ROWS`` tokens is padded with zero rows: MKL's float32 GEMM rounds differently below
12 rows, and the router and shared expert are plain GEMMs over the tokens.

Differences from the official code, all float rounding: OLMoE casts the weights to the model
dtype and accumulates the experts in the model dtype with ``index_add_`` (expert order); here the
combine is float32 in slot order. LLaDA2's gate renormalises only when top_k > 1 (whatever
``norm_topk_prob`` says); a family reproduces that with ``norm_topk = top_k > 1``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dllm.kernels import grouped_matmul
from dllm.kernels.grouped_matmul import MIN_GEMM_ROWS
from dllm.models.config import MoEConfig
from dllm.models.layers import SwiGLU

if TYPE_CHECKING:
    from dllm.parallel.tensor_plan import TensorShard

RENORM_EPS = 1e-20  # LLaDA2's guard on the renormalising sum (below float32's resolution at 1)


@dataclass(frozen=True, slots=True)
class _MLPShape:
    """The two sizes ``SwiGLU`` reads from an ArchConfig, for the shared expert."""

    d_model: int
    mlp_hidden_size: int


class MoEMLP(nn.Module):
    """Routed experts (stacked weights, nn.Linear layout per expert) plus optional shared experts.

    Parameters: ``router.weight`` (E, d_model); ``expert_bias`` (E,) float32 buffer when
    ``cfg.expert_bias``; ``gate_proj`` / ``up_proj`` (E, I, d_model) and ``down_proj``
    (E, d_model, I); ``shared`` (a ``SwiGLU`` of hidden ``shared_hidden``) when it is > 0.
    """

    def __init__(self, d_model: int, cfg: MoEConfig, tp: TensorShard | None = None) -> None:
        """``tp``: expert parallelism over a tensor-parallel group: this rank holds experts
        [lo, hi) of E (and its columns of the shared expert), routes every token with the whole
        router, computes its experts' share and one all-reduce sums the ranks' shares."""
        super().__init__()
        self.cfg, self.tp = cfg, tp
        self.experts = (0, cfg.n_experts) if tp is None else tp.expert_range(cfg.n_experts)
        E, I = self.experts[1] - self.experts[0], cfg.expert_hidden
        shared = cfg.shared_hidden if tp is None else tp.part(cfg.shared_hidden)
        self.router = nn.Linear(d_model, cfg.n_experts, bias=False)
        if cfg.expert_bias:
            self.register_buffer("expert_bias", torch.zeros(cfg.n_experts, dtype=torch.float32))
        else:
            self.expert_bias = None
        self.expert_scale = nn.Parameter(torch.ones(cfg.n_experts)) if cfg.expert_scale else None
        self.act = F.silu if cfg.activation == "silu" else partial(F.gelu, approximate="tanh")
        self.gate_proj = nn.Parameter(torch.empty(E, I, d_model))
        self.up_proj = nn.Parameter(torch.empty(E, I, d_model))
        self.down_proj = nn.Parameter(torch.empty(E, d_model, I))
        self.shared = SwiGLU(_MLPShape(d_model, shared)) if shared > 0 else None
        # the grouped product's row tile: None lets the Triton kernel pick it from the rows per
        # expert; batch-invariant mode pins it (a tile's MMA shape can order a row's sum)
        self.row_tile: int | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Each expert initialised as a fresh nn.Linear would be (uniform in +-1/sqrt(fan_in))."""
        for weight in (self.gate_proj, self.up_proj, self.down_proj):
            bound = 1.0 / math.sqrt(weight.shape[2])
            nn.init.uniform_(weight, -bound, bound)

    def route(self, x2d: Tensor) -> tuple[Tensor, Tensor]:
        """(N, d_model) -> the chosen experts' weights (N, k) float32 and ids (N, k) int64,
        slots in descending order of the (biased) selection score."""
        cfg = self.cfg
        if cfg.score == "sigmoid":  # LLaDA2: router product and scores in float32
            scores = F.linear(x2d.float(), self.router.weight.float()).sigmoid()
        else:  # OLMoE: product in the model dtype, softmax in float32
            scores = self.router(x2d).float().softmax(-1)
        choice = scores if self.expert_bias is None else scores + self.expert_bias.float()
        if cfg.n_group > 1:
            choice = self._keep_best_groups(choice)
        ids = choice.topk(cfg.top_k, dim=-1).indices
        weights = scores.gather(-1, ids)
        if cfg.norm_topk:
            weights = weights / (weights.sum(-1, keepdim=True) + RENORM_EPS)
        if cfg.routed_scale != 1.0:
            weights = weights * cfg.routed_scale
        if self.expert_scale is not None:
            weights = weights * self.expert_scale.float()[ids]
        return weights, ids

    def _keep_best_groups(self, choice: Tensor) -> Tensor:
        """Selection scores with every expert outside the token's ``topk_group`` best groups set
        to -inf; a group's rank is the sum of its two best scores (its best one if it has one)."""
        cfg = self.cfg
        N = choice.shape[0]
        grouped = choice.view(N, cfg.n_group, cfg.n_experts // cfg.n_group)
        group_score = grouped.topk(min(2, grouped.shape[-1]), dim=-1).values.sum(-1)  # (N, G)
        best = group_score.topk(cfg.topk_group, dim=-1).indices
        keep = torch.zeros_like(group_score, dtype=torch.bool).scatter_(1, best, True)
        return grouped.masked_fill(~keep[..., None], float("-inf")).view(N, cfg.n_experts)

    def forward(self, x: Tensor, router_x: Tensor | None = None) -> Tensor:
        """(..., d_model) -> (..., d_model): routed experts' weighted sum plus the shared experts.
        ``router_x`` (same shape): what the router reads when it is not x (DiffusionGemma)."""
        shape = x.shape
        x2d = x.reshape(-1, shape[-1])
        r2d = x2d if router_x is None else router_x.reshape(-1, shape[-1])
        n = x2d.shape[0]
        if x2d.device.type == "cpu" and 0 < n < MIN_GEMM_ROWS:
            x2d = torch.cat([x2d, x2d.new_zeros(MIN_GEMM_ROWS - n, shape[-1])])
            r2d = x2d if router_x is None else torch.cat([r2d, r2d.new_zeros(MIN_GEMM_ROWS - n, shape[-1])])
        out = self._routed(x2d, r2d) if self.tp is None else self._routed_here(x2d, r2d)
        if self.shared is not None:
            out = out + self.shared(x2d)
        if self.tp is not None:  # the ranks' experts and shared-expert columns are partial sums
            out = self.tp.all_reduce(out)
        return out[:n].reshape(shape)

    def _routed(self, x2d: Tensor, r2d: Tensor) -> Tensor:
        """Sum over each token's k experts of weight * expert(token), in float32, slot order
        (``r2d``: the router's input)."""
        N, d = x2d.shape
        E, k = self.cfg.n_experts, self.cfg.top_k
        weights, ids = self.route(r2d)
        flat = ids.reshape(-1)  # (N * k,) token-major
        order = flat.argsort(stable=True)  # by expert, then by (token, slot)
        counts = torch.zeros(E, dtype=torch.int64, device=x2d.device).scatter_add_(0, flat, torch.ones_like(flat))
        offsets = F.pad(counts.cumsum(0), (1, 0))
        xs = x2d.index_select(0, order // k)
        tile = self.row_tile
        h = (self.act(grouped_matmul(xs, self.gate_proj, offsets, row_tile=tile))
             * grouped_matmul(xs, self.up_proj, offsets, row_tile=tile))
        del xs
        ys = grouped_matmul(h, self.down_proj, offsets, row_tile=tile)
        del h
        slots = torch.empty_like(ys).index_copy_(0, order, ys).view(N, k, d)
        out = slots[:, 0].float() * weights[:, :1]
        for j in range(1, k):
            out += slots[:, j].float() * weights[:, j:j + 1]
        return out.to(x2d.dtype)

    def _routed_here(self, x2d: Tensor, r2d: Tensor) -> Tensor:
        """Expert parallel: this rank's experts' share of ``_routed`` (the (token, slot) pairs
        routed to experts [lo, hi), weighted, summed per token in float32). One host read of
        the pair count."""
        N, d = x2d.shape
        lo, hi = self.experts
        weights, ids = self.route(r2d)
        flat = ids.reshape(-1)
        pairs = ((flat >= lo) & (flat < hi)).nonzero()[:, 0]  # token-major (token, slot) pairs
        local = flat[pairs] - lo
        order = local.argsort(stable=True)
        pairs, local = pairs[order], local[order]
        counts = torch.zeros(hi - lo, dtype=torch.int64, device=x2d.device).scatter_add_(0, local, torch.ones_like(local))
        offsets = F.pad(counts.cumsum(0), (1, 0))
        xs = x2d.index_select(0, pairs // self.cfg.top_k)
        tile = self.row_tile
        h = (self.act(grouped_matmul(xs, self.gate_proj, offsets, row_tile=tile))
             * grouped_matmul(xs, self.up_proj, offsets, row_tile=tile))
        ys = grouped_matmul(h, self.down_proj, offsets, row_tile=tile).float() * weights.reshape(-1)[pairs, None]
        # back to (token, slot) places, then summed over slots in order: index_add_ on CUDA adds in
        # no fixed order, which a batch-invariant load cannot have (other ranks' slots are zeros)
        k = self.cfg.top_k
        slots = torch.zeros(N * k, d, dtype=torch.float32, device=x2d.device).index_copy_(0, pairs, ys).view(N, k, d)
        out = slots[:, 0].clone()
        for j in range(1, k):
            out += slots[:, j]
        return out.to(x2d.dtype)


__all__ = ["MoEConfig", "MoEMLP"]
