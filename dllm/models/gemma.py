"""The DiffusionGemma module: one stack of Gemma-4 text layers run two ways.

``encode`` runs the prefix (prompt, then each finished canvas) causally and appends its keys
and values to a ``PrefixKV``; ``denoise`` runs a canvas of random tokens bidirectionally over
itself and the stored prefix, without writing it, and returns the canvas logits. The layers
are the same weights both ways (transformers ties the encoder's to the decoder's); only the
``layer_scalar`` buffers are stored per side. Which keys a query sees, by position:

* encoder, full layers: every valid key at or before the query; sliding layers: those less
  than ``sliding_window`` positions back (Gemma's causal sliding window);
* denoiser, full layers: every valid prefix key and the whole canvas; sliding layers: the
  prefix keys of the last ``sliding_window - 1`` positions before the canvas (what
  transformers' sliding cache keeps) and the whole canvas.

Positions are explicit per row, so a left-padded row sees what it sees alone.

By default those rules are dense (B, T, S) boolean masks for SDPA. ``make_batch_invariant``
(called by ``load(batch_invariant=True)`` on CUDA, issue 39) routes the family's own norms
through ``kernels.rms_norm`` in Gemma's order and its attention through
``kernels.invariant_attention`` given a ``KeyRule`` (per-row validity, and for the encoder the
query and key positions with the sliding window) instead of a mask, and the self-conditioning's
softmax and expected embedding through ``kernels.log_softmax`` and ``kernels.invariant_linear``:
each a fixed reduction order whatever the batch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dllm import kernels
from dllm.kernels.invariant_attention import Positions
from dllm.models.gemma_config import GemmaConfig
from dllm.models.layers import grouped_sdpa
from dllm.models.moe import MoEMLP

if TYPE_CHECKING:
    from dllm.parallel.tensor_plan import TensorShard

gelu_tanh = partial(F.gelu, approximate="tanh")


class GemmaRMSNorm(nn.Module):
    """RMSNorm in float32, times the weight in float32, cast back (Gemma-4's order); no weight
    for the value and router norms."""

    def __init__(self, dim: int, eps: float, scale: bool = True) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if scale else None
        self.use_kernel = False  # DiffusionGemma.make_batch_invariant: kernels.rms_norm, same arithmetic order

    def forward(self, x: Tensor) -> Tensor:
        if self.use_kernel:
            return kernels.rms_norm(x, self.weight, self.eps, cast_last=True)
        x32 = x.float()
        out = x32 * torch.pow(x32.pow(2).mean(-1, keepdim=True) + self.eps, -0.5)
        if self.weight is not None:
            out = out * self.weight.float()
        return out.to(x.dtype)


class GeGLU(nn.Module):
    """down(gelu_tanh(gate(x)) * up(x)): the layers' dense MLP. Tensor parallel (``tp``): the
    rank's share of the hidden units, the down projection's partial sums all-reduced."""

    def __init__(self, d_model: int, hidden: int, tp: TensorShard | None = None) -> None:
        super().__init__()
        self.tp = tp
        hidden = hidden if tp is None else tp.part(hidden)
        self.gate_proj = nn.Linear(d_model, hidden, bias=False)
        self.up_proj = nn.Linear(d_model, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        out = self.down_proj(gelu_tanh(self.gate_proj(x)) * self.up_proj(x))
        return out if self.tp is None else self.tp.all_reduce(out)


def inv_freq(head_dim: int, theta: float, rotary_factor: float, device: torch.device) -> Tensor:
    """(head_dim / 2,) frequencies: Gemma's "default" RoPE (factor 1) or its "proportional" one,
    whose exponents are over the whole head and whose pairs past the factor do not rotate."""
    angles = int(rotary_factor * head_dim // 2)
    freq = 1.0 / theta ** (torch.arange(0, 2 * angles, 2, device=device, dtype=torch.float32) / head_dim)
    return F.pad(freq, (0, head_dim // 2 - angles))


def rope(x: Tensor, positions: Tensor, freq: Tensor) -> Tensor:
    """NeoX rotation of x (B, T, H, D) at positions (B, T), tables in x's dtype (transformers)."""
    angles = positions.float()[..., None] * freq  # (B, T, D / 2)
    emb = torch.cat([angles, angles], -1)[:, :, None]  # (B, T, 1, D)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


@dataclass(frozen=True, slots=True)
class KeyRule:
    """Which keys each query sees, as ``kernels.invariant_attention`` takes it (the batch-invariant
    path, instead of a dense mask): ``valid`` (B, S) per-row key validity and, for the encoder,
    ``positions`` (causal by position, with the sliding window on sliding layers)."""

    valid: Tensor
    positions: Positions | None = None


@dataclass(slots=True)
class PrefixKV:
    """The encoder's keys and values per layer ((B, H_kv, S, D) each, after norm and RoPE) with
    each key's position and validity (B, S); ``denoise`` reads it, ``encode`` appends to it."""

    keys: list[Tensor] = field(default_factory=list)
    values: list[Tensor] = field(default_factory=list)
    positions: Tensor | None = None
    valid: Tensor | None = None

    def append(self, i: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Layer i's stored K/V with k, v appended along the sequence (stored)."""
        if i == len(self.keys):
            self.keys.append(k)
            self.values.append(v)
        else:
            self.keys[i] = torch.cat([self.keys[i], k], 2)
            self.values[i] = torch.cat([self.values[i], v], 2)
        return self.keys[i], self.values[i]


class GemmaAttention(nn.Module):
    """Gemma-4 attention: q / k norm, scale 1, values normed without weight; full layers have
    no value projection (the keys before their norm are the values).

    Tensor parallel (``tp``): the rank's query heads and the K/V heads they read (this layer's
    count and head size; one replicated K/V head where the layer has fewer than ranks), so the
    ``PrefixKV`` holds the rank's heads only; o_proj's partial sums are all-reduced."""

    def __init__(self, cfg: GemmaConfig, i: int, tp: TensorShard | None = None) -> None:
        super().__init__()
        self.tp = tp
        self.head_dim, self.n_kv_heads = cfg.layer_heads(i)
        self.n_heads = cfg.n_heads
        if tp is not None:
            lo, hi = tp.kv_head_range(self.n_kv_heads)
            self.n_heads, self.n_kv_heads = tp.part(cfg.n_heads), hi - lo
        d = cfg.d_model
        self.q_proj = nn.Linear(d, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d, self.n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d, self.n_kv_heads * self.head_dim, bias=False) if cfg.is_sliding(i) else None
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, d, bias=False)
        self.q_norm = GemmaRMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.k_norm = GemmaRMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.v_norm = GemmaRMSNorm(self.head_dim, cfg.rms_norm_eps, scale=False)

    def forward(self, x: Tensor, positions: Tensor, freq: Tensor, allowed: Tensor | KeyRule,
                prefix: tuple[Tensor, Tensor] | None, store: PrefixKV | None, i: int) -> Tensor:
        """x (B, T, d); ``allowed`` (B, T, S) bool over [prefix keys, own keys] (SDPA), or a
        ``KeyRule`` over the same keys (``kernels.invariant_attention``); ``store``: append the
        window's K/V there (the encoder)."""
        B, T, _ = x.shape
        q = rope(self.q_norm(self.q_proj(x).view(B, T, self.n_heads, self.head_dim)), positions, freq)
        raw_k = self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim)
        raw_v = raw_k if self.v_proj is None else self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim)
        k = rope(self.k_norm(raw_k), positions, freq).transpose(1, 2)  # (B, H_kv, T, D)
        v = self.v_norm(raw_v).transpose(1, 2)
        if store is not None:
            k, v = store.append(i, k, v)
        elif prefix is not None:
            k, v = torch.cat([prefix[0], k], 2), torch.cat([prefix[1], v], 2)
        if isinstance(allowed, KeyRule):  # (B, T, H, D), keys in a fixed order whatever the batch
            out = kernels.invariant_attention(q.transpose(1, 2), k, v, allowed.valid, k.shape[2], scale=1.0,
                                              positions=allowed.positions)
        else:
            out = grouped_sdpa(q.transpose(1, 2), k, v, allowed[:, None], self.n_kv_heads != self.n_heads,
                               scale=1.0).transpose(1, 2)
        out = self.o_proj(out.reshape(B, T, -1))  # (B, T, d): the rank's heads' partial sum
        return out if self.tp is None else self.tp.all_reduce(out)


class GemmaLayer(nn.Module):
    """Sandwich-normed attention, then the dense GeGLU and the experts side by side (under
    tensor parallelism each all-reduces its own output: both are normed apart before they add)."""

    def __init__(self, cfg: GemmaConfig, i: int, tp: TensorShard | None = None) -> None:
        super().__init__()
        d, eps = cfg.d_model, cfg.rms_norm_eps
        self.self_attn = GemmaAttention(cfg, i, tp)
        self.mlp = GeGLU(d, cfg.mlp_hidden_size, tp)
        self.moe = MoEMLP(d, cfg.moe, tp)
        self.router_norm = GemmaRMSNorm(d, eps, scale=False)
        self.router_scale = nn.Parameter(torch.ones(d))
        for name in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm", "post_feedforward_layernorm_1", "post_feedforward_layernorm_2",
                     "pre_feedforward_layernorm_2"):
            setattr(self, name, GemmaRMSNorm(d, eps))
        self.register_buffer("layer_scalar", torch.ones(1))
        self.register_buffer("encoder_layer_scalar", torch.ones(1))
        self.root = d ** -0.5

    def forward(self, x: Tensor, positions: Tensor, freq: Tensor, allowed: Tensor | KeyRule,
                prefix: tuple[Tensor, Tensor] | None, store: PrefixKV | None, i: int) -> Tensor:
        h = self.self_attn(self.input_layernorm(x), positions, freq, allowed, prefix, store, i)
        x = x + self.post_attention_layernorm(h)
        dense = self.post_feedforward_layernorm_1(self.mlp(self.pre_feedforward_layernorm(x)))
        router_x = self.router_norm(x) * self.router_scale * self.root
        experts = self.post_feedforward_layernorm_2(self.moe(self.pre_feedforward_layernorm_2(x), router_x))
        x = x + self.post_feedforward_layernorm(dense + experts)
        scalar = self.encoder_layer_scalar if store is not None else self.layer_scalar
        return x * scalar.to(x.dtype)  # a float32 buffer under bfloat16 weights (transformers multiplies in place)


class DiffusionGemma(nn.Module):
    """Embeddings (times sqrt(d)), the shared layers, final norm, tied LM head with soft-capping,
    and the denoiser's self-conditioning block.

    Tensor parallel (``tp``, ``dllm.parallel.tensor_plan``'s ``GEMMA_PLAN``): the layers hold
    the rank's heads, dense hidden units and experts (``tensor_shard``); the embedding, the LM
    head and the self-conditioning block stay whole on every rank, so the logits are whole rows
    and ``tensor_parallel`` (what the engine reads for vocabulary-shard logits) stays None."""

    tensor_parallel = None

    def __init__(self, cfg: GemmaConfig, tp: TensorShard | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.invariant_kernels = False  # make_batch_invariant: KeyRules and fixed-order kernels (issue 39)
        self.tensor_shard = tp  # this rank's TensorShard (heads, hidden units, experts); None: one process
        d = cfg.d_model
        self.embed = nn.Embedding(cfg.vocab_size, d)
        self.layers = nn.ModuleList(GemmaLayer(cfg, i, tp) for i in range(cfg.n_layers))
        self.norm = GemmaRMSNorm(d, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(d, cfg.vocab_size, bias=False)
        self.self_conditioning = nn.Module()
        self.self_conditioning.pre_norm = GemmaRMSNorm(d, cfg.rms_norm_eps)
        self.self_conditioning.post_norm = GemmaRMSNorm(d, cfg.rms_norm_eps, scale=False)
        for name, (i, o) in {"gate_proj": (d, cfg.mlp_hidden_size), "up_proj": (d, cfg.mlp_hidden_size),
                             "down_proj": (cfg.mlp_hidden_size, d)}.items():
            setattr(self.self_conditioning, name, nn.Linear(i, o, bias=False))
        self._sqrt_d: dict[tuple, Tensor] = {}  # sqrt(d_model) per (dtype, device), see embedding_scale

    def embedding_scale(self, dtype: torch.dtype) -> Tensor:
        """sqrt(d_model) rounded to ``dtype`` first, as transformers scales (made once per dtype
        and device: a CUDA graph's capture cannot copy a new one from the host)."""
        key = (dtype, self.device)
        scale = self._sqrt_d.get(key)
        if scale is None:
            scale = self._sqrt_d[key] = torch.tensor(self.config.d_model ** 0.5, dtype=dtype, device=self.device)
        return scale

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.weight.dtype

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self.config.eos_token_ids

    # what the engine reads: no mask token, so its "undecided" placeholder is an id past the
    # vocabulary (never embedded: the uniform strategy forwards its own canvas)
    @property
    def mask_token_id(self) -> int:
        return self.config.vocab_size

    shift_logits = False
    attention = "encoder_denoiser"
    uniform_state = True  # dllm.engine.uniform_state: strategy "uniform", cache "encoder"
    dense_attention_mask = True  # dllm.engine.memory: (queries x keys) masks, not key spans

    def kv_cache_bytes(self, batch: int, length: int) -> int:
        """The encoder's K/V of ``length`` positions for ``batch`` rows (layers differ in shape;
        under tensor parallelism the rank's K/V heads)."""
        item = torch.empty((), dtype=self.dtype).element_size()
        heads = [(layer.self_attn.head_dim, layer.self_attn.n_kv_heads) for layer in self.layers]
        return sum(2 * batch * kv * length * dim * item for dim, kv in heads)

    def new_prefix(self) -> PrefixKV:
        return PrefixKV()

    def make_batch_invariant(self) -> dict[str, int]:
        """Route this family's own norms (``GemmaRMSNorm``, Gemma's arithmetic order), attention
        (``KeyRule``s instead of dense masks) and self-conditioning (softmax, expected embedding)
        through the fixed-order kernels; the same Parameters. Returns how many norms and
        attentions. ``dllm.models.batch_invariant.make_batch_invariant`` calls it after swapping
        the nn.Linear layers (the MoE experts run ``kernels.grouped_matmul`` already)."""
        norms = [m for m in self.modules() if isinstance(m, GemmaRMSNorm)]
        for norm in norms:
            norm.use_kernel = True
        self.invariant_kernels = True
        return {"rms_norm": len(norms), "attention": len(self.layers)}

    def forward(self, *args, **kwargs):
        raise ValueError("DiffusionGemma is a uniform-state model (no mask token): decode it with "
                         "strategy='uniform' and cache='encoder'; mask-based rules, strategies and caches do "
                         "not apply")

    def _embed(self, ids: Tensor) -> Tensor:
        return self.embed(ids) * self.embedding_scale(self.dtype)

    def _freqs(self) -> tuple[Tensor, Tensor]:
        cfg = self.config
        return (inv_freq(cfg.head_dim, cfg.rope_theta, 1.0, self.device),
                inv_freq(cfg.global_head_dim, cfg.global_rope_theta, cfg.global_rotary_factor, self.device))

    def _encoder_rules(self, positions: Tensor, key_pos: Tensor,
                       key_valid: Tensor) -> tuple[Tensor | KeyRule, Tensor | KeyRule]:
        """What the encoder's queries at positions (B, T) see of the keys at key_pos (B, S) (the
        last T are the queries' own): full and sliding layers' dense masks, or their ``KeyRule``s."""
        if self.invariant_kernels:  # a pad query that sees no key gets zeros there, not itself: its own
            # key is invalid, so no valid query reads what it computes
            return (KeyRule(key_valid, Positions(positions, key_pos)),
                    KeyRule(key_valid, Positions(positions, key_pos, self.config.sliding_window)))
        T, S = positions.shape[1], key_pos.shape[1]
        itself = torch.zeros(T, S, dtype=torch.bool, device=positions.device)
        itself[:, S - T:] = torch.eye(T, dtype=torch.bool, device=positions.device)  # a pad query sees itself: no NaN
        query, key = positions[:, :, None], key_pos[:, None, :]  # (B, T, 1), (B, 1, S): bool (B, T, S) masks only
        causal = (key_valid[:, None, :] & (key <= query)) | itself
        return causal, causal & (key > query - self.config.sliding_window)

    def encode(self, ids: Tensor, positions: Tensor, valid: Tensor, store: PrefixKV) -> Tensor:
        """Run ids (B, T) at positions (B, T) (``valid`` (B, T): False for left padding) causally
        over the stored prefix and themselves, append their K/V to ``store``; returns the final
        hidden states (B, T, d) (after the norm). A prompt holding the image token is refused:
        dllm reads the text model only."""
        image = self.config.image_token_id
        if store.positions is None and image is not None and bool((ids[valid] == image).any()):
            raise ValueError(f"the prompt holds the image token (id {image}); dllm runs DiffusionGemma's text "
                             "model only (the vision tower is not loaded): send text")
        old_pos = store.positions if store.positions is not None else positions[:, :0]
        old_valid = store.valid if store.valid is not None else valid[:, :0]
        key_pos, key_valid = torch.cat([old_pos, positions], 1), torch.cat([old_valid, valid], 1)
        causal, sliding = self._encoder_rules(positions, key_pos, key_valid)
        store.positions, store.valid = key_pos, key_valid
        local, full = self._freqs()
        x = self._embed(ids)
        for i, layer in enumerate(self.layers):
            slide = self.config.is_sliding(i)
            x = layer(x, positions, local if slide else full, sliding if slide else causal, None, store, i)
        return self.norm(x)

    def _expected_embedding(self, logits: Tensor) -> Tensor:
        """softmax(logits) @ embedding (B, C, d): the self-conditioning signal, through the
        fixed-order kernels once ``make_batch_invariant`` ran (exp of the log-probabilities)."""
        if self.invariant_kernels:
            probs = kernels.log_softmax(logits).exp().to(self.dtype)
            return kernels.invariant_linear(probs, self.embed.weight.T)  # w (d, V): x @ w.T = probs @ E
        probs = logits.softmax(-1, dtype=torch.float32).to(self.dtype)
        return probs @ self.embed.weight

    def denoise(self, canvas: Tensor, positions: Tensor, store: PrefixKV,
                self_conditioning: Tensor | None = None) -> Tensor:
        """Logits (B, C, vocab) float32 of a canvas (B, C) at positions (B, C) over the stored
        prefix (not written); ``self_conditioning``: the previous step's logits (B, C, vocab), or
        None on a canvas's first step (a zero signal)."""
        cfg = self.config
        x = self._embed(canvas)
        if self_conditioning is None:
            soft = torch.zeros_like(x)
        else:  # the expected embedding under the previous step's distribution
            soft = self._expected_embedding(self_conditioning) * self.embedding_scale(x.dtype)
        sc = self.self_conditioning
        normed = sc.pre_norm(soft)
        x = sc.post_norm(x + sc.down_proj(gelu_tanh(sc.gate_proj(normed)) * sc.up_proj(normed)))
        B, C = canvas.shape
        own = torch.ones(B, C, dtype=torch.bool, device=canvas.device)
        if store.valid is None:
            full = sliding = own
        else:  # keys before the canvas start, the last sliding_window - 1 of them for sliding layers
            start = positions[:, :1]
            full = torch.cat([store.valid, own], 1)
            recent = store.valid & (store.positions > start - cfg.sliding_window)
            sliding = torch.cat([recent, own], 1)
        if self.invariant_kernels:  # the same keys for every canvas query: per-row validity is the rule
            full, sliding = KeyRule(full), KeyRule(sliding)
        else:
            full, sliding = full[:, None, :].expand(B, C, -1), sliding[:, None, :].expand(B, C, -1)
        local, global_ = self._freqs()
        for i, layer in enumerate(self.layers):
            slide = cfg.is_sliding(i)
            prefix = (store.keys[i], store.values[i]) if store.keys else None
            x = layer(x, positions, local if slide else global_, sliding if slide else full, prefix, None, i)
        logits = self.lm_head(self.norm(x)).float()
        if cfg.final_logit_softcapping:
            cap = cfg.final_logit_softcapping
            logits = torch.tanh(logits / cap) * cap
        return logits
