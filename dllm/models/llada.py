"""LLaDA-8B / LLaDA-1.5: config keys and checkpoint names (OLMo-derived layout)."""
from __future__ import annotations

from typing import Any

from dllm.models.config import ArchConfig, end_and_pad_ids, refuse_unsupported

MODEL_TYPES = ("llada",)
ARCHITECTURES = ("LLaDAModelLM",)
LAYOUT_MARKERS = (r"model\.transformer\.wte\.weight",)
DEFAULT_MASK_ID = 126336

# checkpoint name -> module name; "{i}" is the layer index. Block-level ff_out is the DOWN
# projection, ff_proj the GATE; the top-level transformer.ff_out is the LM head.
LAYER_WEIGHTS = {
    "model.transformer.blocks.{i}.attn_norm.weight": "layers.{i}.attn_norm.weight",
    "model.transformer.blocks.{i}.q_proj.weight": "layers.{i}.attn.q_proj.weight",
    "model.transformer.blocks.{i}.k_proj.weight": "layers.{i}.attn.k_proj.weight",
    "model.transformer.blocks.{i}.v_proj.weight": "layers.{i}.attn.v_proj.weight",
    "model.transformer.blocks.{i}.attn_out.weight": "layers.{i}.attn.o_proj.weight",
    "model.transformer.blocks.{i}.ff_norm.weight": "layers.{i}.mlp_norm.weight",
    "model.transformer.blocks.{i}.ff_proj.weight": "layers.{i}.mlp.gate_proj.weight",
    "model.transformer.blocks.{i}.up_proj.weight": "layers.{i}.mlp.up_proj.weight",
    "model.transformer.blocks.{i}.ff_out.weight": "layers.{i}.mlp.down_proj.weight",
}
# OLMo switches of configuration_llada.py that LLaDA-8B / 1.5 set to these values; others change the
# math under the same tensor names (alibi, norms, activation, logit scaling) or the names themselves.
SUPPORTED = {"alibi": (False,), "rope": (True,), "layer_norm_type": ("rms",), "activation_type": ("silu",),
             "block_type": ("llama",), "scale_logits": (False,), "input_emb_norm": (False,), "clip_qkv": (None,),
             "include_bias": (False,)}
GLOBAL_WEIGHTS = {
    "model.transformer.wte.weight": "embed.weight",
    "model.transformer.ln_f.weight": "norm.weight",
    "model.transformer.ff_out.weight": "lm_head.weight",
}


def _kv_heads(raw: dict[str, Any], n_heads: int) -> int:
    """configuration_llada.py's effective_n_kv_heads: n_kv_heads, else 1 under multi_query_attention,
    else n_heads; both set must agree."""
    n_kv, mqa = raw.get("n_kv_heads"), raw.get("multi_query_attention")
    implied = None if mqa is None else (1 if mqa else n_heads)
    if n_kv is None:
        return implied or n_heads
    if implied is not None and n_kv != implied:
        raise ValueError(f"n_kv_heads={n_kv} contradicts multi_query_attention={mqa} (which means {implied} K/V "
                         "heads); set one of them")
    return n_kv


def parse_config(raw: dict[str, Any]) -> ArchConfig:
    """config.json of a LLaDA checkpoint -> ArchConfig."""
    refuse_unsupported(raw, SUPPORTED)
    eos_ids, pad_id = end_and_pad_ids(raw, 126081)
    n_heads = raw["n_heads"]
    return ArchConfig(
        family="llada",
        d_model=raw["d_model"],
        n_layers=raw["n_layers"],
        n_heads=n_heads,
        n_kv_heads=_kv_heads(raw, n_heads),
        # configuration_llada.py: mlp_ratio * d_model when mlp_hidden_size is null
        mlp_hidden_size=raw.get("mlp_hidden_size") or raw.get("mlp_ratio", 4) * raw["d_model"],
        vocab_size=raw.get("embedding_size") or raw["vocab_size"],
        rope_theta=float(raw.get("rope_theta", 10000.0)),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
        max_sequence_length=raw.get("max_sequence_length", 4096),
        mask_token_id=raw.get("mask_token_id", DEFAULT_MASK_ID),
        eos_token_ids=eos_ids,
        pad_token_id=pad_id,
        qkv_bias=bool(raw.get("include_qkv_bias", False)),
        rope_full_precision=bool(raw.get("rope_full_precision", True)),
        tie_embeddings=bool(raw.get("weight_tying", False)),
        shift_logits=False,
    )
