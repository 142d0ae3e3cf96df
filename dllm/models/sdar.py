"""SDAR and TraDo (JetAstra/SDAR, Gen-Verse/dLLM-RL): Qwen3 dense, block-causal, unshifted.

Layout (``modeling_sdar.py``, ``config.json`` of SDAR-4B/8B-Chat): Qwen3 names, GQA, ``head_dim``
from the config (not hidden / heads), per-head RMSNorm ``q_norm`` / ``k_norm`` on q and k before
a full-head NeoX RoPE whose tables are cast to the activation dtype, no biases
(``attention_bias`` false; when true it covers q, k, v and o), untied head. Attention is
bidirectional inside a block of ``block_size`` tokens and causal across blocks; the official
``generate.py`` reads the logit of position i from output i (no shift). ``block_size`` (4) and
``mask_token_id`` (151669, ``<|MASK|>``) are in the published config.json, but earlier copies
of it lack them, so they default to the official values.

SDAR-30B-A3B-Chat (``SDARMoeForCausalLM``, ``model_type: "sdar_moe"``) is the same on Qwen3-MoE
layers (``modeling_sdar_moe.py``; JetEngine's ``models/sdar_moe.py``): a layer not in
``mlp_only_layers`` and on the ``decoder_sparse_step`` grid routes through ``mlp.gate`` (softmax in
float32 over ``num_experts``, top ``num_experts_per_tok``, renormalised when ``norm_topk_prob``,
Qwen3-MoE's default false) to one tensor per expert ``mlp.experts.{e}``; the others have the
dense MLP.
"""
from __future__ import annotations

from typing import Any

from dllm.models import dream
from dllm.models.config import ArchConfig, MoEConfig, block_origin_of, end_and_pad_ids
from dllm.models.sources import Source, mlp_sources, one

MODEL_TYPES = ("sdar", "sdar_moe")
ARCHITECTURES = ("SDARForCausalLM", "SDARMoeForCausalLM")
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
}
GLOBAL_WEIGHTS = dream.GLOBAL_WEIGHTS  # Qwen / OLMoE names: embed_tokens, norm, lm_head
_BIASES = ("q_proj", "k_proj", "v_proj", "o_proj")


def layer_sources(cfg: ArchConfig, i: int) -> dict[str, Source]:
    """Layer i's dense MLP or its experts (SDAR-MoE); the attention biases when attention_bias is set."""
    p, m = f"model.layers.{i}.", f"layers.{i}."
    out = mlp_sources(m, p, cfg, i, shared=f"{p}mlp.shared_expert")  # Qwen3-MoE has no shared expert
    if cfg.qkv_bias:
        out.update({f"{m}attn.{b}.bias": one(f"{p}self_attn.{b}.bias") for b in _BIASES})
    return out


def _moe(raw: dict[str, Any], n_layers: int) -> tuple[MoEConfig | None, tuple[int, ...]]:
    """SDAR-MoE's routing and MoE layers (Qwen3-MoE's rule and defaults); none for dense SDAR."""
    if not raw.get("num_experts"):
        return None, ()
    step, dense = raw.get("decoder_sparse_step", 1), set(raw.get("mlp_only_layers") or [])
    if not isinstance(step, int) or step <= 0:
        raise ValueError(f"decoder_sparse_step={step!r} must be a positive integer")
    layers = tuple(i for i in range(n_layers) if i not in dense and (i + 1) % step == 0)
    moe = MoEConfig(n_experts=raw["num_experts"], top_k=raw.get("num_experts_per_tok", 8),
                    expert_hidden=raw.get("moe_intermediate_size", 768), score="softmax",
                    norm_topk=bool(raw.get("norm_topk_prob", False)))
    return (moe, layers) if layers else (None, ())


def parse_config(raw: dict[str, Any]) -> ArchConfig:
    """config.json of an SDAR / TraDo checkpoint -> ArchConfig."""
    eos_ids, pad_id = end_and_pad_ids(raw, 151643)
    n_heads = raw["num_attention_heads"]
    bias = bool(raw.get("attention_bias", False))
    if raw.get("use_sliding_window") or raw.get("rope_scaling"):
        raise ValueError("use_sliding_window / rope_scaling are not supported (no published SDAR checkpoint "
                         "sets them); set them to false / null")
    n_layers = raw["num_hidden_layers"]
    moe, moe_layers = _moe(raw, n_layers)
    return ArchConfig(
        family="sdar",
        d_model=raw["hidden_size"],
        n_layers=n_layers,
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
        pad_token_id=pad_id,
        qkv_bias=bias,
        o_bias=bias,
        qk_norm=True,
        rope_full_precision=False,
        tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
        shift_logits=False,
        attention="block_causal",
        block_size=int(raw.get("block_size") or DEFAULT_BLOCK_SIZE),
        block_origin=block_origin_of(raw),
        moe=moe,
        moe_layers=moe_layers,
    )
