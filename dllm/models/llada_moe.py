"""LLaDA-MoE-7B-A1B (``LLaDAMoEModelLM``): OLMoE-like MoE, bidirectional, unshifted logits.

Its config.json says ``model_type: "llada"`` like LLaDA-8B (ZHZisZZ/dllm tells users to rename it
"lladamoe"; both are accepted): the registry tells the two apart by ``architectures``, and the
loader refuses weights of the other layout by name. Layout (the Hub remote code
``modeling_lladamoe.py``, mirrored in ZHZisZZ/dllm): Qwen/OLMoE names (``model.embed_tokens``,
``self_attn.{q,k,v,o}_proj``), per-head RMSNorm ``q_norm`` / ``k_norm`` (weight of head_dim,
applied to each head, unlike OLMoE's norm over the whole projection) when ``qk_layernorm``,
NeoX RoPE over ``head_dim * partial_rotary_factor`` dims (tables cast to the activation dtype),
head_dim = hidden / heads. Layers with ``moe_layer_freq[i] == 0`` have a dense SwiGLU of
``dense_intermediate_size``; the others route: ``mlp.gate`` (a Linear in the model dtype),
softmax in float32, top-k, no renormalisation (the official block hard-codes
``norm_topk_prob = False`` whatever the config says), one tensor per expert ``mlp.experts.{e}``,
and a shared expert ``shared_expert`` on the layer (not under ``mlp``) when
``shared_expert_intermediate_size`` is set.
"""
from __future__ import annotations

from typing import Any

from dllm.models import dream
from dllm.models.config import ArchConfig, end_and_pad_ids
from dllm.models.config import MoEConfig
from dllm.models.sources import Source, mlp_sources, one

MODEL_TYPES = ("llada", "lladamoe")
ARCHITECTURES = ("LLaDAMoEModelLM", "LLaDAMoEModel")
DEFAULT_MASK_ID = 156895  # <|mask|> of the Ling tokenizer
DEFAULT_EOS_ID = 156892  # <|endoftext|>
LAYOUT_MARKERS = (r"model\.layers\.\d+\.mlp\.experts\.\d+\.gate_proj\.weight",
                  r"model\.layers\.\d+\.self_attn\.q_proj\.weight")

LAYER_WEIGHTS = {
    "model.layers.{i}.input_layernorm.weight": "layers.{i}.attn_norm.weight",
    "model.layers.{i}.self_attn.q_proj.weight": "layers.{i}.attn.q_proj.weight",
    "model.layers.{i}.self_attn.k_proj.weight": "layers.{i}.attn.k_proj.weight",
    "model.layers.{i}.self_attn.v_proj.weight": "layers.{i}.attn.v_proj.weight",
    "model.layers.{i}.self_attn.o_proj.weight": "layers.{i}.attn.o_proj.weight",
    "model.layers.{i}.post_attention_layernorm.weight": "layers.{i}.mlp_norm.weight",
}
GLOBAL_WEIGHTS = dream.GLOBAL_WEIGHTS  # Qwen / OLMoE names: embed_tokens, norm, lm_head


def layer_sources(cfg: ArchConfig, i: int) -> dict[str, Source]:
    """q/k norms and biases where configured; the dense MLP or the MoE tensors of layer i."""
    p, m = f"model.layers.{i}.", f"layers.{i}."
    out: dict[str, Source] = {}
    if cfg.qk_norm:
        out[f"{m}attn.q_norm.weight"] = one(f"{p}self_attn.q_norm.weight")
        out[f"{m}attn.k_norm.weight"] = one(f"{p}self_attn.k_norm.weight")
    if cfg.qkv_bias:
        out.update({f"{m}attn.{w}.bias": one(f"{p}self_attn.{w}.bias") for w in ("q_proj", "k_proj", "v_proj", "o_proj")})
    out.update(mlp_sources(m, p, cfg, i, shared=f"{p}shared_expert"))
    return out


def _refuse_unsupported(raw: dict[str, Any]) -> None:
    if raw.get("moe_router_enable_expert_bias"):
        raise ValueError("moe_router_enable_expert_bias=true is not supported: LLaDA-MoE adds that bias to "
                         "the routing weights themselves, not only to the choice (as LLaDA2 does)")
    for key in ("clip_qkv", "rope_scaling"):
        if raw.get(key) is not None:
            raise ValueError(f"{key}={raw[key]!r} is not supported (LLaDA-MoE-7B-A1B does not set it)")


def parse_config(raw: dict[str, Any]) -> ArchConfig:
    """config.json of a LLaDA-MoE checkpoint -> ArchConfig."""
    _refuse_unsupported(raw)
    eos_ids, pad_id = end_and_pad_ids(raw, DEFAULT_EOS_ID)
    n_heads, d_model, n_layers = raw["num_attention_heads"], raw["hidden_size"], raw["num_hidden_layers"]
    head_dim = d_model // n_heads
    freq = raw.get("moe_layer_freq") or [1] * n_layers
    if not isinstance(freq, list) or len(freq) != n_layers:
        raise ValueError(f"moe_layer_freq must list one 0 (dense) or 1 (MoE) per layer ({n_layers}), got {freq!r}")
    moe_layers = tuple(i for i, f in enumerate(freq) if f)
    shared = raw.get("shared_expert_intermediate_size")
    expert_hidden = raw["expert_intermediate_size"]
    moe = MoEConfig(n_experts=raw["num_experts"], top_k=raw["num_experts_per_tok"], expert_hidden=expert_hidden,
                    score="softmax", norm_topk=False, shared_hidden=shared if shared and shared > 0 else 0)
    dense_hidden = raw.get("dense_intermediate_size") or 0
    bias = bool(raw.get("attention_bias", False))
    return ArchConfig(
        family="llada_moe",
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=raw.get("num_key_value_heads") or n_heads,
        head_dim=head_dim,
        mlp_hidden_size=dense_hidden if dense_hidden > 0 else expert_hidden,  # unused without dense layers
        vocab_size=raw["vocab_size"],
        rope_theta=float(raw["rope_theta"]),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
        max_sequence_length=raw.get("max_position_embeddings", 4096),
        mask_token_id=raw.get("mask_token_id", DEFAULT_MASK_ID),
        eos_token_ids=eos_ids,
        pad_token_id=pad_id,
        qkv_bias=bias,
        o_bias=bias,
        qk_norm=bool(raw.get("qk_layernorm", False)),
        rotary_dim=int(head_dim * float(raw.get("partial_rotary_factor", 1.0))),
        rope_full_precision=False,
        tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
        shift_logits=False,
        attention="bidirectional",
        moe=moe if moe_layers else None,
        moe_layers=moe_layers,
    )
