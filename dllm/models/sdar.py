"""SDAR and TraDo (JetAstra/SDAR, Gen-Verse/dLLM-RL): Qwen3 dense, block-causal, unshifted.

Layout (``modeling_sdar.py``, ``config.json`` of SDAR-4B/8B-Chat): Qwen3 names, GQA, ``head_dim``
from the config (not hidden / heads), per-head RMSNorm ``q_norm`` / ``k_norm`` on q and k before
a full-head NeoX RoPE whose tables are cast to the activation dtype, no biases
(``attention_bias`` false; when true it covers q, k, v and o), untied head. Attention is
bidirectional inside a block of ``block_size`` tokens and causal across blocks; the official
``generate.py`` reads the logit of position i from output i (no shift). ``block_size`` (4) and
``mask_token_id`` (151669, ``<|MASK|>``) are in the published config.json, but earlier copies
of it lack them, so they default to the official values.
"""
from __future__ import annotations

from typing import Any

from dllm.models import dream
from dllm.models.config import ArchConfig, block_origin_of
from dllm.models.sources import Source, one

MODEL_TYPES = ("sdar",)
ARCHITECTURES = ("SDARForCausalLM",)
DEFAULT_MASK_ID = 151669  # <|MASK|> in the SDAR tokenizer
DEFAULT_BLOCK_SIZE = 4  # generate.py's --block_length default, the size SDAR was trained with
LAYOUT_MARKERS = (r"model\.layers\.\d+\.self_attn\.q_norm\.weight", r"model\.layers\.\d+\.mlp\.gate_proj\.weight")

LAYER_WEIGHTS = {
    "model.layers.{i}.input_layernorm.weight": "layers.{i}.attn_norm.weight",
    "model.layers.{i}.self_attn.q_proj.weight": "layers.{i}.attn.q_proj.weight",
    "model.layers.{i}.self_attn.k_proj.weight": "layers.{i}.attn.k_proj.weight",
    "model.layers.{i}.self_attn.v_proj.weight": "layers.{i}.attn.v_proj.weight",
    "model.layers.{i}.self_attn.q_norm.weight": "layers.{i}.attn.q_norm.weight",
    "model.layers.{i}.self_attn.k_norm.weight": "layers.{i}.attn.k_norm.weight",
    "model.layers.{i}.self_attn.o_proj.weight": "layers.{i}.attn.o_proj.weight",
    "model.layers.{i}.post_attention_layernorm.weight": "layers.{i}.mlp_norm.weight",
    "model.layers.{i}.mlp.gate_proj.weight": "layers.{i}.mlp.gate_proj.weight",
    "model.layers.{i}.mlp.up_proj.weight": "layers.{i}.mlp.up_proj.weight",
    "model.layers.{i}.mlp.down_proj.weight": "layers.{i}.mlp.down_proj.weight",
}
GLOBAL_WEIGHTS = dream.GLOBAL_WEIGHTS  # Qwen / OLMoE names: embed_tokens, norm, lm_head
_BIASES = ("q_proj", "k_proj", "v_proj", "o_proj")


def layer_sources(cfg: ArchConfig, i: int) -> dict[str, Source]:
    """The attention biases, present only when attention_bias is set."""
    if not cfg.qkv_bias:
        return {}
    return {f"layers.{i}.attn.{p}.bias": one(f"model.layers.{i}.self_attn.{p}.bias") for p in _BIASES}


def parse_config(raw: dict[str, Any]) -> ArchConfig:
    """config.json of an SDAR / TraDo checkpoint -> ArchConfig."""
    eos = raw.get("eos_token_id", 151643)
    eos_ids = tuple(eos) if isinstance(eos, list) else (eos,)
    n_heads = raw["num_attention_heads"]
    bias = bool(raw.get("attention_bias", False))
    if raw.get("use_sliding_window") or raw.get("rope_scaling"):
        raise ValueError("use_sliding_window / rope_scaling are not supported (no published SDAR checkpoint "
                         "sets them); set them to false / null")
    return ArchConfig(
        family="sdar",
        d_model=raw["hidden_size"],
        n_layers=raw["num_hidden_layers"],
        n_heads=n_heads,
        n_kv_heads=raw.get("num_key_value_heads") or n_heads,
        head_dim=raw.get("head_dim") or 0,
        mlp_hidden_size=raw["intermediate_size"],
        vocab_size=raw["vocab_size"],
        rope_theta=float(raw.get("rope_theta", 1000000.0)),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        max_sequence_length=raw.get("max_position_embeddings", 32768),
        mask_token_id=raw.get("mask_token_id", DEFAULT_MASK_ID),
        eos_token_ids=eos_ids,
        pad_token_id=raw.get("pad_token_id") if raw.get("pad_token_id") is not None else eos_ids[0],
        qkv_bias=bias,
        o_bias=bias,
        qk_norm=True,
        rope_full_precision=False,
        tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
        shift_logits=False,
        attention="block_causal",
        block_size=int(raw.get("block_size") or DEFAULT_BLOCK_SIZE),
        block_origin=block_origin_of(raw),
    )
