"""Tokenizer layouts and config.json writers of the newer families, for ``dllm.models.tiny``.

Each mirrors its published checkpoint: the config keys (SDAR-8B-Chat's config.json; LLaDA2.0
mini's as in inclusionAI/dFactory; LLaDA-MoE-7B-A1B's as its remote-code config class reads
it), the special tokens and a chat template of that family, at tiny sizes.
"""
from __future__ import annotations

from typing import Any

# SDAR / TraDo: the Qwen3 tokenizer with <|MASK|> added; ChatML template (system turn only if given).
SDAR_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|MASK|>"]
SDAR_ROLES = {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "mask_token": "<|MASK|>"}
SDAR_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# LLaDA2.x and LLaDA-MoE: the Ling tokenizer (<|endoftext|> 156892, <|mask|> 156895) and its
# role-tagged template: <role>SYSTEM</role>...<|role_end|><role>HUMAN</role>...<|role_end|><role>ASSISTANT</role>
LING_SPECIALS = ["<|endoftext|>", "<|mask|>", "<role>", "</role>", "<|role_end|>"]
LING_ROLES = {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "mask_token": "<|mask|>"}
LING_CHAT_TEMPLATE = (
    "{% for message in messages %}<role>"
    "{% if message['role'] == 'user' %}HUMAN{% else %}{{ message['role'] | upper }}{% endif %}</role>"
    "{{ message['content'] }}<|role_end|>{% endfor %}"
    "{% if add_generation_prompt %}<role>ASSISTANT</role>{% endif %}"
)
# DiffusionGemma: Gemma's special tokens first (pad 0, eos 1, bos 2), no mask token, turn template.
GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>", "<image>"]
GEMMA_ROLES = {"pad_token": "<pad>", "eos_token": "<eos>", "bos_token": "<bos>"}
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<start_of_turn>{{ message['role'] }}\n"
    "{{ message['content'] }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
TOKENIZER_LAYOUTS = {
    "sdar": (SDAR_SPECIALS, SDAR_ROLES, SDAR_CHAT_TEMPLATE),
    "llada2_moe": (LING_SPECIALS, LING_ROLES, LING_CHAT_TEMPLATE),
    "llada_moe": (LING_SPECIALS, LING_ROLES, LING_CHAT_TEMPLATE),
    "diffusion_gemma": (GEMMA_SPECIALS, GEMMA_ROLES, GEMMA_CHAT_TEMPLATE),
}


def _ids(ids: dict[str, int]) -> dict[str, Any]:
    return {"mask_token_id": ids["mask_token"], "eos_token_id": ids["eos_token"],
            "pad_token_id": ids["pad_token"]}


def sdar_config(ids: dict[str, int], *, d_model: int, n_layers: int, n_heads: int, n_kv_heads: int,
                mlp_hidden: int, vocab: int, max_len: int, block_size: int) -> dict[str, Any]:
    """SDAR-8B-Chat's config.json keys; head_dim deliberately not hidden / heads."""
    return {
        "architectures": ["SDARForCausalLM"], "model_type": "sdar",
        "auto_map": {"AutoConfig": "configuration_sdar.SDARConfig",
                     "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM"},
        "attention_bias": False, "attention_dropout": 0.0, "block_size": block_size,
        "head_dim": 2 * d_model // n_heads, "hidden_act": "silu", "hidden_size": d_model,
        "intermediate_size": mlp_hidden, "max_position_embeddings": max_len,
        "num_attention_heads": n_heads, "num_hidden_layers": n_layers, "num_key_value_heads": n_kv_heads,
        "rms_norm_eps": 1e-6, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
        "tie_word_embeddings": False, "torch_dtype": "float32", "use_cache": False,
        "use_sliding_window": False, "vocab_size": vocab, **_ids(ids),
    }


def llada2_config(ids: dict[str, int], *, d_model: int, n_layers: int, n_heads: int, n_kv_heads: int,
                  mlp_hidden: int, vocab: int, max_len: int, n_experts: int, top_k: int,
                  expert_hidden: int) -> dict[str, Any]:
    """LLaDA2.0-mini's config.json keys: layer 0 dense, sigmoid group-limited routing, one shared
    expert, half of each head rotated."""
    return {
        "architectures": ["LLaDA2MoeModelLM"], "model_type": "llada2_moe",
        "auto_map": {"AutoConfig": "configuration_llada2_moe.LLaDA2MoeConfig",
                     "AutoModelForCausalLM": "modeling_llada2_moe.LLaDA2MoeModelLM"},
        "num_hidden_layers": n_layers, "hidden_size": d_model, "intermediate_size": mlp_hidden,
        "first_k_dense_replace": 1, "hidden_act": "silu", "max_position_embeddings": max_len,
        "moe_intermediate_size": expert_hidden, "norm_topk_prob": True, "num_experts_per_tok": top_k,
        "norm_head": False, "num_attention_heads": n_heads, "num_experts": n_experts,
        "num_key_value_heads": n_kv_heads, "rope_theta": 600000, "rope_scaling": None,
        "tie_word_embeddings": False, "torch_dtype": "float32", "use_bias": False, "use_rmsnorm": True,
        "rms_norm_eps": 1e-6, "head_dim": d_model // n_heads, "num_shared_experts": 1, "use_cache": False,
        "use_qkv_bias": False, "use_qk_norm": True, "vocab_size": vocab,
        "rotary_dim": d_model // n_heads // 2, "partial_rotary_factor": 0.5,
        "router_dtype": "fp32", "moe_router_enable_expert_bias": True, "routed_scaling_factor": 2.5,
        "n_group": 2, "topk_group": 1, "score_function": "sigmoid", "use_sliding_window": False,
        **_ids(ids),
    }


def llada_moe_config(ids: dict[str, int], *, d_model: int, n_layers: int, n_heads: int, n_kv_heads: int,
                     mlp_hidden: int, vocab: int, max_len: int, n_experts: int, top_k: int,
                     expert_hidden: int) -> dict[str, Any]:
    """LLaDA-MoE-7B-A1B's config keys (model_type "llada", told apart by architectures): every
    layer MoE, softmax top-k without renormalisation; a shared expert to exercise that path."""
    return {
        "architectures": ["LLaDAMoEModelLM"], "model_type": "llada",
        "auto_map": {"AutoConfig": "configuration_lladamoe.LLaDAMoEConfig",
                     "AutoModelForCausalLM": "modeling_lladamoe.LLaDAMoEModelLM"},
        "hidden_size": d_model, "num_hidden_layers": n_layers, "num_attention_heads": n_heads,
        "num_key_value_heads": n_kv_heads, "dense_intermediate_size": mlp_hidden,
        "expert_intermediate_size": expert_hidden, "shared_expert_intermediate_size": expert_hidden,
        "num_experts": n_experts, "num_experts_per_tok": top_k, "moe_layer_freq": [1] * n_layers,
        "norm_topk_prob": False, "moe_router_enable_expert_bias": False, "moe_router_score_function": "softmax",
        "qk_layernorm": True, "partial_rotary_factor": 0.5, "rope_theta": 50000, "rope_scaling": None,
        "attention_bias": False, "clip_qkv": None, "hidden_act": "silu", "max_position_embeddings": max_len,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "vocab_size": vocab, "use_cache": False,
        "torch_dtype": "float32", **_ids(ids),
    }


def diffusion_gemma_config(ids: dict[str, int], *, d_model: int, n_layers: int, n_heads: int, n_kv_heads: int,
                           mlp_hidden: int, vocab: int, max_len: int, n_experts: int, top_k: int,
                           expert_hidden: int, canvas_length: int, image_id: int) -> dict[str, Any]:
    """config.json as transformers' ``save_pretrained`` writes it for DiffusionGemma: ``text_config``
    with sliding layers and a last full layer of twice the head size and one K/V head
    (``per_layer_config``), a sliding window of one canvas, and a tiny vision tower's config (its
    weights are not written: dllm reads the text model only)."""
    head = d_model // n_heads
    layer_types = ["sliding_attention"] * (n_layers - 1) + ["full_attention"]
    text = {
        "model_type": "diffusion_gemma_text", "vocab_size": vocab, "hidden_size": d_model,
        "intermediate_size": mlp_hidden, "num_hidden_layers": n_layers, "num_attention_heads": n_heads,
        "num_key_value_heads": n_kv_heads, "head_dim": head, "layer_types": layer_types,
        "per_layer_config": {str(n_layers - 1): {"head_dim": 2 * head, "num_key_value_heads": 1}},
        "sliding_window": canvas_length, "num_experts": n_experts, "top_k_experts": top_k,
        "moe_intermediate_size": expert_hidden, "max_position_embeddings": max_len, "rms_norm_eps": 1e-6,
        "hidden_activation": "gelu_pytorch_tanh", "attention_bias": False, "tie_word_embeddings": True,
        "use_bidirectional_attention": None,
        "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                               "rope_theta": 1000000.0}},
        "pad_token_id": ids["pad_token"], "eos_token_id": ids["eos_token"], "bos_token_id": ids["bos_token"],
    }
    vision = {"model_type": "gemma4_vision", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
              "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8, "position_embedding_size": 16,
              "patch_size": 4}
    return {"architectures": ["DiffusionGemmaForBlockDiffusion"], "model_type": "diffusion_gemma",
            "text_config": text, "vision_config": vision, "canvas_length": canvas_length,
            "image_token_id": image_id, "tie_word_embeddings": True, "dtype": "float32"}
