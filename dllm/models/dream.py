"""Dream-v0-7B: Qwen2 checkpoint names, GQA, q/k/v biases, logits shifted right by one."""
from __future__ import annotations

from typing import Any

from dllm.models.config import ArchConfig, end_and_pad_ids, refuse_unsupported

MODEL_TYPES = ("dream",)
DEFAULT_MASK_ID = 151666

LAYER_WEIGHTS = {
    "model.layers.{i}.input_layernorm.weight": "layers.{i}.attn_norm.weight",
    "model.layers.{i}.self_attn.q_proj.weight": "layers.{i}.attn.q_proj.weight",
    "model.layers.{i}.self_attn.q_proj.bias": "layers.{i}.attn.q_proj.bias",
    "model.layers.{i}.self_attn.k_proj.weight": "layers.{i}.attn.k_proj.weight",
    "model.layers.{i}.self_attn.k_proj.bias": "layers.{i}.attn.k_proj.bias",
    "model.layers.{i}.self_attn.v_proj.weight": "layers.{i}.attn.v_proj.weight",
    "model.layers.{i}.self_attn.v_proj.bias": "layers.{i}.attn.v_proj.bias",
    "model.layers.{i}.self_attn.o_proj.weight": "layers.{i}.attn.o_proj.weight",
    "model.layers.{i}.post_attention_layernorm.weight": "layers.{i}.mlp_norm.weight",
    "model.layers.{i}.mlp.gate_proj.weight": "layers.{i}.mlp.gate_proj.weight",
    "model.layers.{i}.mlp.up_proj.weight": "layers.{i}.mlp.up_proj.weight",
    "model.layers.{i}.mlp.down_proj.weight": "layers.{i}.mlp.down_proj.weight",
}
GLOBAL_WEIGHTS = {
    "model.embed_tokens.weight": "embed.weight",
    "model.norm.weight": "norm.weight",
    "lm_head.weight": "lm_head.weight",
}


def parse_qwen2_config(raw: dict[str, Any], *, family: str, default_mask_id: int) -> ArchConfig:
    """Qwen2-style config keys (Dream, Fast-dLLM v2) -> ArchConfig, bidirectional, shifted."""
    refuse_unsupported(raw, {"rope_scaling": (None,), "use_sliding_window": (False,)})
    if any(t != "full_attention" for t in raw.get("layer_types") or ()):
        raise ValueError(f"layer_types={raw['layer_types']!r} is not supported (dllm computes full "
                         "attention in every layer, as the published checkpoints set it): this checkpoint is another "
                         "model than its family's; load one with the published config")
    eos_ids, pad_id = end_and_pad_ids(raw, 151643)
    n_heads = raw["num_attention_heads"]
    return ArchConfig(
        family=family,
        d_model=raw["hidden_size"],
        n_layers=raw["num_hidden_layers"],
        n_heads=n_heads,
        n_kv_heads=raw.get("num_key_value_heads") or n_heads,
        head_dim=raw.get("head_dim") or 0,  # 0: hidden_size // num_attention_heads
        mlp_hidden_size=raw["intermediate_size"],
        vocab_size=raw["vocab_size"],
        rope_theta=float(raw.get("rope_theta", 10000.0)),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        max_sequence_length=raw.get("max_position_embeddings", 32768),
        mask_token_id=raw.get("mask_token_id", default_mask_id),
        eos_token_ids=eos_ids,
        pad_token_id=pad_id,
        qkv_bias=True,
        rope_full_precision=False,
        tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
        shift_logits=True,
    )


def parse_config(raw: dict[str, Any]) -> ArchConfig:
    """config.json of a Dream checkpoint -> ArchConfig."""
    return parse_qwen2_config(raw, family="dream", default_mask_id=DEFAULT_MASK_ID)
