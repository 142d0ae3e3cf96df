"""The published config.json of each family, every key and value kept but the sizes shrunk, loads
onto tensors under the published names and computes what a plain-torch reading of them computes.

The configs mirror: GSAI-ML/LLaDA-8B-Instruct (OLMo-style keys), Dream-org/Dream-v0-Instruct-7B,
Efficient-Large-Model/Fast_dLLM_v2_7B (``Fast_dLLM_Qwen``, ``layer_types``, no mask id: the
default 151665) and inclusionAI/LLaDA2.0-mini (as inclusionAI/dFactory ships it, with the Hub's
``model_type``; no eos or mask id: the defaults 156892 / 156895). Where a config leaves a token id
to the family's default, the tiny model keeps the real vocabulary so the default is a row of it.
"""
from __future__ import annotations

import json

import pytest
import torch

from dllm.models import load_model
from dllm.models.tiny import write_tiny_checkpoint
from dllm.models.visibility import KeyVisibility
from tests.models.test_parity import reference_dream, reference_llada
from tests.models.test_parity_families import reference_llada2

LLADA_8B_INSTRUCT = {  # sizes: d_model, n_layers, n_heads, n_kv_heads, mlp_hidden_size; ids: within 320
    "activation_type": "silu", "alibi": False, "alibi_bias_max": 8.0, "architectures": ["LLaDAModelLM"],
    "attention_dropout": 0.0, "attention_layer_norm": False, "attention_layer_norm_with_affine": True,
    "auto_map": {"AutoConfig": "configuration_llada.LLaDAConfig",
                 "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM", "AutoModel": "modeling_llada.LLaDAModelLM"},
    "bias_for_layer_norm": False, "block_group_size": 1, "block_type": "llama", "d_model": 64,
    "embedding_dropout": 0.0, "embedding_size": 320, "eos_token_id": 301, "flash_attention": False,
    "include_bias": False, "include_qkv_bias": False, "init_cutoff_factor": None, "init_device": "meta",
    "init_fn": "mitchell", "init_std": 0.02, "input_emb_norm": False, "layer_norm_type": "rms",
    "layer_norm_with_affine": True, "mask_token_id": 310, "max_sequence_length": 4096, "mlp_hidden_size": 128,
    "mlp_ratio": 4, "model_type": "llada", "multi_query_attention": None, "n_heads": 4, "n_kv_heads": 4,
    "n_layers": 2, "pad_token_id": 301, "precision": "amp_bf16", "residual_dropout": 0.0, "rms_norm_eps": 1e-05,
    "rope": True, "rope_full_precision": True, "rope_theta": 500000.0, "scale_logits": False,
    "transformers_version": "4.46.3", "use_cache": False, "vocab_size": 320, "weight_tying": False,
}
DREAM_V0_INSTRUCT = {  # sizes shrunk, ids within 320
    "architectures": ["DreamModel"], "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
    "bos_token_id": 301, "eos_token_id": 301, "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02,
    "intermediate_size": 128, "mask_token_id": 310, "max_position_embeddings": 131072, "max_window_layers": 28,
    "model_type": "Dream", "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
    "pad_token_id": 301, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.46.2", "use_cache": True, "use_mrope": False, "use_sliding_window": False,
    "vocab_size": 320,
}
FAST_DLLM_V2_7B = {  # sizes shrunk; ids and vocabulary as published
    "architectures": ["Fast_dLLM_QwenForCausalLM"], "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration.Fast_dLLM_QwenConfig", "AutoModel": "modeling.Fast_dLLM_QwenModel",
                 "AutoModelForCausalLM": "modeling.Fast_dLLM_QwenForCausalLM"},
    "bd_size": 32, "bos_token_id": 151643, "conplemenrary_mask": True, "eos_token_id": 151645, "hidden_act": "silu",
    "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 64, "layer_types": ["full_attention"] * 2,
    "max_position_embeddings": 32768, "max_window_layers": 28, "model_type": "Fast_dLLM_Qwen",
    "num_attention_heads": 2, "num_hidden_layers": 2, "num_key_value_heads": 1, "pad_token_id": 151645,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.53.1", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 152064,
}
LLADA2_MINI = {  # sizes shrunk (16 experts in the 8 groups, top 2); ids and vocabulary as published
    "architectures": ["LLaDA2MoeModelLM"], "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_llada2_moe.LLaDA2MoeConfig",
                 "AutoModel": "modeling_llada2_moe.LLaDA2MoeModel",
                 "AutoModelForCausalLM": "modeling_llada2_moe.LLaDA2MoeModelLM"},
    "num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64, "first_k_dense_replace": 1,
    "hidden_act": "silu", "max_position_embeddings": 16384, "model_type": "llada2_moe", "moe_intermediate_size": 16,
    "norm_topk_prob": True, "num_experts_per_tok": 2, "norm_head": False, "num_attention_heads": 2,
    "num_experts": 16, "num_key_value_heads": 1, "rope_theta": 600000, "rope_scaling": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.52.3", "use_bias": False,
    "use_rmsnorm": True, "rms_norm_eps": 1e-06, "head_dim": 16, "num_shared_experts": 1, "use_cache": False,
    "use_qkv_bias": False, "embedding_dropout": 0.0, "norm_softmax": False, "output_dropout": 0.0,
    "vocab_size": 157184, "rotary_dim": 8, "using_split_qkv_in_self_attention": False, "router_dtype": "fp32",
    "moe_router_enable_expert_bias": True, "routed_scaling_factor": 2.5, "n_group": 8, "topk_group": 4,
    "score_function": "sigmoid", "initializer_range": 0.02, "max_window_layers": 28, "output_router_logits": False,
    "pad_token_id": 156892, "partial_rotary_factor": 0.5, "use_sliding_window": False,
}
T = 11
# (mask id, end ids) each config gives or leaves to the family's default
IDS = {"llada": (310, (301,)), "dream": (310, (301,)), "fast_dllm_v2": (151665, (151645,)),
       "llada2_moe": (156895, (156892,))}


# family, published config, tiny writer sizes, reference (path, ids, pos, valid), block of the forward
CASES = {
    "llada": (LLADA_8B_INSTRUCT, dict(d_model=64, n_layers=2, n_heads=4, mlp_hidden=128, vocab_size=320),
              reference_llada, 0),
    "dream": (DREAM_V0_INSTRUCT, dict(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, mlp_hidden=128,
                                      vocab_size=320), reference_dream, 0),
    # one 32-token block covers the 11-token canvas: bidirectional inside it, Dream's math
    "fast_dllm_v2": (FAST_DLLM_V2_7B, dict(d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, mlp_hidden=64,
                                           vocab_size=152064, block_size=32), reference_dream, T),
    "llada2_moe": (LLADA2_MINI, dict(d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, mlp_hidden=64,
                                     vocab_size=157184, n_experts=16, top_k=2, expert_hidden=16),
                   lambda path, ids, pos, valid: reference_llada2(path, ids, pos, valid, 4), 4),
}


@pytest.mark.parametrize("family", list(CASES))
def test_the_published_config_loads_and_computes_the_reference(tmp_path, family):
    published, sizes, reference, block = CASES[family]
    path = write_tiny_checkpoint(tmp_path / family, family, seed=41, **sizes)
    (path / "config.json").write_text(json.dumps(published))
    model = load_model(path)
    assert (model.mask_token_id, model.eos_token_ids) == IDS[family]
    ids = torch.randint(0, 250, (2, T), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(T).expand(2, -1)
    valid = torch.ones(2, T, dtype=torch.bool)
    spans = tuple((lo, min(lo + block, T), min(lo + block, T)) for lo in range(0, T, block)) if block else None
    with torch.no_grad():
        ours = model(ids, pos, KeyVisibility(valid=valid, spans=spans))
        theirs = reference(path, ids, pos, valid)
    assert float((ours - theirs).norm() / theirs.norm()) < 1e-5
