"""LLaDA2.0 / 2.1 (``LLaDA2MoeModelLM``): Ling-MoE layout, block diffusion, unshifted logits.

Layout (the Hub remote code ``modeling_llada2_moe.py``, mirrored in inclusionAI/dFactory and
ZHZisZZ/dllm; LLaDA2.0-mini / flash ``config.json`` as in dFactory): ``model.word_embeddings``,
per layer a fused ``attention.query_key_value`` (rows: the q heads, then k, then v), per-head
RMSNorm ``query_layernorm`` / ``key_layernorm`` before a NeoX RoPE over the first
``head_dim * partial_rotary_factor`` dims of each head (tables cast to the activation dtype),
``attention.dense`` as the output projection; the first ``first_k_dense_replace`` layers have a
dense SwiGLU, the others an MoE: router ``mlp.gate.weight``, its selection bias
``mlp.gate.expert_bias`` (a persistent buffer, so always in the checkpoint), one tensor per
expert ``mlp.experts.{e}.*`` and the shared experts ``mlp.shared_experts.*`` (hidden
``moe_intermediate_size * num_shared_experts``). Routing as the official gate: sigmoid scores,
group-limited top-k, renormalised when top_k > 1 (whatever ``norm_topk_prob`` says), times
``routed_scaling_factor``; ``score_function`` is not read by that gate and is not here either.

dllm splits ``query_key_value`` into q / k / v at load (``sources.rows_of``) and stacks the
experts for ``MoEMLP``. Attention is block-causal over blocks of 32 (the official
``generate``'s ``block_length``; the config does not carry it), counted from position 0.
"""
from __future__ import annotations

from typing import Any

from dllm.models.config import ArchConfig, block_origin_of, end_and_pad_ids
from dllm.models.config import MoEConfig
from dllm.models.sources import Source, mlp_sources, one, rows_of

MODEL_TYPES = ("llada2_moe", "llada21_moe")  # the second: ZHZisZZ/dllm's copy of 2.1's config
ARCHITECTURES = ("LLaDA2MoeModelLM",)
DEFAULT_MASK_ID = 156895  # <|mask|>
DEFAULT_EOS_ID = 156892  # <|endoftext|>
DEFAULT_BLOCK_SIZE = 32
LAYOUT_MARKERS = (r"model\.word_embeddings\.weight", r"model\.layers\.\d+\.attention\.query_key_value\.weight")

LAYER_WEIGHTS = {
    "model.layers.{i}.input_layernorm.weight": "layers.{i}.attn_norm.weight",
    "model.layers.{i}.attention.dense.weight": "layers.{i}.attn.o_proj.weight",
    "model.layers.{i}.post_attention_layernorm.weight": "layers.{i}.mlp_norm.weight",
}
GLOBAL_WEIGHTS = {
    "model.word_embeddings.weight": "embed.weight",
    "model.norm.weight": "norm.weight",
    "lm_head.weight": "lm_head.weight",
}


def layer_sources(cfg: ArchConfig, i: int) -> dict[str, Source]:
    """q / k / v as row ranges of query_key_value; the dense MLP or the MoE tensors of layer i."""
    p, m = f"model.layers.{i}.", f"layers.{i}."
    q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    out: dict[str, Source] = {}
    for kind in ("weight", "bias") if cfg.qkv_bias else ("weight",):
        fused = f"{p}attention.query_key_value.{kind}"
        out[f"{m}attn.q_proj.{kind}"] = rows_of(fused, 0, q)
        out[f"{m}attn.k_proj.{kind}"] = rows_of(fused, q, q + kv)
        out[f"{m}attn.v_proj.{kind}"] = rows_of(fused, q + kv, q + 2 * kv)
    if cfg.qk_norm:
        out[f"{m}attn.q_norm.weight"] = one(f"{p}attention.query_layernorm.weight")
        out[f"{m}attn.k_norm.weight"] = one(f"{p}attention.key_layernorm.weight")
    if cfg.o_bias:
        out[f"{m}attn.o_proj.bias"] = one(f"{p}attention.dense.bias")
    out.update(mlp_sources(m, p, cfg, i, shared=f"{p}mlp.shared_experts"))
    if i in cfg.moe_layers:
        out[f"{m}mlp.expert_bias"] = one(f"{p}mlp.gate.expert_bias")
    return out


def _refuse_unsupported(raw: dict[str, Any]) -> None:
    for key in ("norm_head", "use_sliding_window", "rope_scaling"):
        if raw.get(key):
            raise ValueError(f"{key}={raw[key]!r} is not supported (LLaDA2.0 / 2.1 mini and flash do not set it)")


def parse_config(raw: dict[str, Any]) -> ArchConfig:
    """config.json of a LLaDA2.x checkpoint -> ArchConfig (defaults: the remote config class)."""
    _refuse_unsupported(raw)
    eos_ids, pad_id = end_and_pad_ids(raw, DEFAULT_EOS_ID)
    n_heads, d_model = raw["num_attention_heads"], raw["hidden_size"]
    head_dim = raw.get("head_dim") or d_model // n_heads
    rotary = int(head_dim * float(raw.get("partial_rotary_factor", 0.5)))
    if raw.get("rotary_dim") not in (None, rotary):
        raise ValueError(f"rotary_dim={raw['rotary_dim']} disagrees with head_dim * partial_rotary_factor = "
                         f"{rotary} (the official code uses the latter); fix one of them")
    n_layers, top_k = raw["num_hidden_layers"], raw["num_experts_per_tok"]
    moe_layers = tuple(range(min(raw.get("first_k_dense_replace", 0), n_layers), n_layers))
    moe = MoEConfig(
        n_experts=raw["num_experts"], top_k=top_k, expert_hidden=raw["moe_intermediate_size"],
        score="sigmoid", norm_topk=top_k > 1, routed_scale=float(raw.get("routed_scaling_factor", 2.5)),
        n_group=raw.get("n_group", 8), topk_group=raw.get("topk_group", 4), expert_bias=True,
        shared_hidden=raw["moe_intermediate_size"] * (raw.get("num_shared_experts") or 0),
    )
    return ArchConfig(
        family="llada2_moe",
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=raw.get("num_key_value_heads") or n_heads,
        head_dim=head_dim,
        mlp_hidden_size=raw["intermediate_size"],
        vocab_size=raw["vocab_size"],
        rope_theta=float(raw.get("rope_theta", 10000.0)),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
        max_sequence_length=raw.get("max_position_embeddings", 16384),
        mask_token_id=raw.get("mask_token_id", DEFAULT_MASK_ID),
        eos_token_ids=eos_ids,
        pad_token_id=pad_id,
        qkv_bias=bool(raw.get("use_qkv_bias", False)),
        o_bias=bool(raw.get("use_bias", True)),
        qk_norm=bool(raw.get("use_qk_norm", True)),
        rotary_dim=rotary,
        rope_full_precision=False,
        tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
        shift_logits=False,
        attention="block_causal",
        block_size=DEFAULT_BLOCK_SIZE,
        block_origin=block_origin_of(raw),
        moe=moe if moe_layers else None,
        moe_layers=moe_layers,
    )
