"""Building blocks shared by every model family: RMSNorm, RoPE, attention, SwiGLU MLP (and the
base of the linears that replace nn.Linear).

The families (LLaDA, Dream, block-diffusion Qwen2, SDAR, LLaDA2, LLaDA-MoE) differ only in weight
names, config keys, ArchConfig switches (q/k norm, partial rotary, biases, MoE layers) and the
attributes the engine reads; the math lives here once (routing in ``moe.py``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dllm.models.config import ArchConfig
from dllm.models.visibility import KeyVisibility

if TYPE_CHECKING:
    from dllm.parallel.tensor_plan import TensorShard


class LinearTwin(nn.Module):
    """What replaces an ``nn.Linear`` to run its product another way (batch-invariant kernels,
    prepacked weights): the linear's own Parameters, so tied weights and state_dict keys are
    unchanged, and its repr. Subclasses write ``forward``."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class RMSNorm(nn.Module):
    """RMSNorm computed in float32, cast back, then scaled (LLaDA and Qwen2 order)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


def rope_cos_sin(position_ids: Tensor, head_dim: int, theta: float) -> tuple[Tensor, Tensor]:
    """Half-split (NeoX / HF) rotary tables in float32 for explicit per-row positions.

    position_ids: (B, T) -> cos, sin: (B, 1, T, head_dim)
    """
    inv_freq = 1.0 / theta ** (
        torch.arange(0, head_dim, 2, device=position_ids.device, dtype=torch.float32) / head_dim
    )
    freqs = position_ids.float()[..., None] * inv_freq  # (B, T, head_dim / 2)
    emb = torch.cat([freqs, freqs], dim=-1)[:, None]  # (B, 1, T, head_dim)
    return emb.cos(), emb.sin()


def _rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, full_precision: bool) -> Tensor:
    """Rotate x (B, H, T, D). LLaDA rotates in fp32; Dream casts the tables to x's dtype.

    Tables narrower than the head (partial rotary, LLaDA2 / LLaDA-MoE) rotate the leading
    dims only; the rest of each head passes through unchanged."""
    rotary = cos.shape[-1]
    if rotary < x.shape[-1]:
        return torch.cat([apply_rope(x[..., :rotary], cos, sin, full_precision), x[..., rotary:]], dim=-1)
    if full_precision:
        x32 = x.float()
        return (x32 * cos + _rotate_half(x32) * sin).to(x.dtype)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + _rotate_half(x) * sin


class Attention(nn.Module):
    """Multi-head / grouped-query attention with one entry point for cached and uncached use.

    Without a cache the window attends to itself. With a layer cache ``(k_buf, v_buf)`` of shape
    (B, H_kv, S, D), the window's keys and values are written in place at ``write_at`` (an offset,
    or the (T,) positions as a tensor: a replayed CUDA graph reads them as data) and the
    queries attend to the whole static-shaped buffer; ``visible`` says which keys each query
    sees (see ``attend``). Static shapes keep the door open for CUDA graphs and torch.compile.

    Tensor parallel (``tp``, with cfg the rank's ``local_config``): the rank's heads; o_proj
    holds their input columns and its output is all-reduced.
    """

    def __init__(self, cfg: ArchConfig, tp: TensorShard | None = None) -> None:
        super().__init__()
        self.tp = tp
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.rope_full_precision = cfg.rope_full_precision
        q_dim, kv_dim = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        self.q_proj = nn.Linear(cfg.d_model, q_dim, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(cfg.d_model, kv_dim, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(cfg.d_model, kv_dim, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(q_dim, cfg.d_model, bias=cfg.o_bias)
        # per-head RMSNorm of q and k (one weight of head_dim shared by the heads), before RoPE
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        # None: SDPA; ``load(batch_invariant=True)`` sets kernels.invariant_attention (issue 39)
        self.attention_kernel = None

    def forward(
        self,
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
        visible: KeyVisibility | None,
        layer_cache: tuple[Tensor, Tensor] | None = None,
        write_at: int | Tensor = 0,
        rows: Tensor | slice | None = None,
    ) -> Tensor:
        """(B, T, d_model); with ``rows`` only those queries' outputs (see ``pick_rows``): every
        query's K/V is still computed and written, the output projection skips the rest."""
        B, T, _ = x.shape
        q = self.queries(x, cos, sin)
        k, v = self.keys_values(x, cos, sin)
        if layer_cache is not None:
            k_buf, v_buf = layer_cache  # (B, H_kv, S, D), keys stored after RoPE
            if isinstance(write_at, Tensor):  # positions (T,) as data: one CUDA graph serves every window
                k_buf.index_copy_(2, write_at, k)
                v_buf.index_copy_(2, write_at, v)
            else:
                k_buf[:, :, write_at : write_at + T] = k
                v_buf[:, :, write_at : write_at + T] = v
            k, v = k_buf, v_buf
        return self.project(pick_rows(self.attend(q, k, v, visible).reshape(B, T, -1), rows))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, visible: KeyVisibility | None) -> Tensor:
        """``attend`` with this layer's attention kernel (the one place; the caches call it too)."""
        return attend(q, k, v, visible, self.attention_kernel)

    def project(self, heads: Tensor) -> Tensor:
        """(..., H * D) attention outputs -> (..., d_model): o_proj, and under tensor parallelism
        the all-reduce of the ranks' partial sums (the one place, the adaptive cache calls it too)."""
        out = self.o_proj(heads)
        return out if self.tp is None else self.tp.all_reduce(out)

    def queries(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """(B, T, d_model) -> (B, H, T, D) queries: projection, per-head norm, RoPE. The one place
        a query is made (the adaptive cache's partial layers call it too)."""
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim)
        if self.q_norm is not None:
            q = self.q_norm(q)
        return apply_rope(q.transpose(1, 2), cos, sin, self.rope_full_precision)

    def keys_values(self, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        """(B, T, d_model) -> keys (after norm and RoPE) and values, each (B, H_kv, T, D)."""
        B, T, _ = x.shape
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim)
        if self.k_norm is not None:
            k = self.k_norm(k)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        return apply_rope(k.transpose(1, 2), cos, sin, self.rope_full_precision), v


def pick_rows(x: Tensor, rows: Tensor | slice | None) -> Tensor:
    """The queries of x (B, T, ...) that ``rows`` selects: a slice of T, or (t,) long query
    indices (a replayed CUDA graph's window, as data), keep (B, t, ...); a (B, T) bool mask gives
    (N, ...) in row-major order; None keeps all."""
    if rows is None:
        return x
    if isinstance(rows, slice):
        return x[:, rows]
    return x.index_select(1, rows) if rows.dtype == torch.long else x[rows]


def expand_heads_under_masks(device: torch.device) -> bool:
    """Whether a masked SDPA call repeats grouped K/V heads instead of passing ``enable_gqa`` (in
    ``grouped_sdpa``, which DiffusionGemma calls too). On CUDA, flash attention takes no mask and
    the memory-efficient and cuDNN kernels take no ``enable_gqa``, so a masked grouped call falls
    back to the math kernel, which materialises the (B, H, T, S) scores; repeating K/V
    (B, H, S, D) keeps the memory-efficient kernel. A CPU's flash kernel takes both."""
    return device.type == "cuda"


def grouped_sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, gqa: bool,
                 scale: float | None = None) -> Tensor:
    """SDPA (B, H, T, D) -> (B, H, T, D) with grouped K/V heads broadcast, or repeated where a
    mask would otherwise send the call to the math kernel (``expand_heads_under_masks``)."""
    if gqa and mask is not None and expand_heads_under_masks(q.device):
        groups = q.shape[1] // k.shape[1]
        k, v, gqa = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1), False
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa, scale=scale)


def attend(q: Tensor, k: Tensor, v: Tensor, visible: KeyVisibility | None, kernel=None) -> Tensor:
    """SDPA of q (B, H, T, D) over k, v (B, H_kv, S, D) -> (B, T, H, D).

    ``kernel``: instead of SDPA, a function (q, k, v, valid, key_end) -> (B, T, H, D) run on each
    key prefix (``dllm.kernels.invariant_attention`` under ``load(batch_invariant=True)``);
    training's dense ``allowed`` rule always runs SDPA.

    Invalid keys are masked per row only ((B, 1, 1, S), or no mask at all); block-causal spans
    run one call per query block on its key prefix; grouped K/V heads are broadcast, not
    repeated. No (T, S) mask or score matrix is materialised, so SDPA's fused backends (flash
    on CPU) keep the working set linear in T and S."""
    B, H, T, D = q.shape
    visible = visible or KeyVisibility()
    gqa = k.shape[1] != H

    def sdpa(queries: Tensor, key_end: int) -> Tensor:
        if kernel is not None:
            return kernel(queries, k, v, visible.valid, key_end)
        mask = None if visible.valid is None else visible.valid[:, None, None, :key_end]
        return grouped_sdpa(queries, k[:, :, :key_end], v[:, :, :key_end], mask, gqa).transpose(1, 2)

    if visible.allowed is not None:  # training's dense rule: one call with a (B | 1, 1, T, S) mask
        mask = visible.allowed[None, None] if visible.valid is None else (
            visible.allowed[None, None] & visible.valid[:, None, None, :])
        return grouped_sdpa(q, k, v, mask, gqa).transpose(1, 2)
    segments = visible.segments(T, k.shape[2])
    if len(segments) == 1:
        return sdpa(q, segments[0][2])
    out = q.new_empty(B, T, H, D)
    for lo, hi, key_end in segments:
        out[:, lo:hi] = sdpa(q[:, :, lo:hi], key_end)
    return out


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)); tensor parallel (``tp``): the rank's hidden units, the
    down projection's partial sums all-reduced."""

    def __init__(self, cfg: ArchConfig, tp: TensorShard | None = None) -> None:
        super().__init__()
        self.tp = tp
        self.gate_proj = nn.Linear(cfg.d_model, cfg.mlp_hidden_size, bias=False)
        self.up_proj = nn.Linear(cfg.d_model, cfg.mlp_hidden_size, bias=False)
        self.down_proj = nn.Linear(cfg.mlp_hidden_size, cfg.d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        out = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return out if self.tp is None else self.tp.all_reduce(out)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: ArchConfig, mlp: nn.Module | None = None, tp: TensorShard | None = None) -> None:
        """``mlp``: the layer's MLP when it is not the dense SwiGLU (an MoE layer); ``tp``: the
        rank's tensor-parallel shard (None: one process)."""
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.rms_norm_eps)
        self.attn = Attention(cfg, tp)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg, tp) if mlp is None else mlp

    def forward(self, x, cos, sin, visible, layer_cache=None, write_at: int | Tensor = 0,
                rows: Tensor | slice | None = None) -> Tensor:
        """``rows``: only these queries' outputs are needed (the last block, when the LM head
        reads a few): the others' K/V are written, their output projection and MLP are skipped."""
        x = pick_rows(x, rows) + self.attn(self.attn_norm(x), cos, sin, visible, layer_cache, write_at, rows)
        return x + self.mlp(self.mlp_norm(x))
