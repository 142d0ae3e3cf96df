"""Random-weight models of real shapes (LLaDA-8B, Dream-7B, a ~1B LLaDA, SDAR-8B, LLaDA2.0-mini), built on
the device.

No checkpoint is written or read: the module is built on the meta device, cast there, given
uninitialised storage on the target device in the target dtype (``to_empty``), then filled
tensor by tensor in place, so an 8B bf16 model takes its 16 GB once and never a float32 copy.
Configs are the families' own config.json keys, parsed by the families' own parsers, so the
shapes are exactly what loading the real checkpoint would build.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from dllm.models.registry import FAMILIES
from dllm.models.transformer import DiffusionTransformer

# config.json of each shape (public configs of GSAI-ML/LLaDA-8B-Instruct, Dream-org/Dream-v0-Instruct-7B)
_LLADA_IDS = {"mask_token_id": 126336, "eos_token_id": 126081, "pad_token_id": 126081}
SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "llada-8b": ("llada", {"d_model": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 32,
                           "mlp_hidden_size": 12288, "vocab_size": 126464, "embedding_size": 126464,
                           "rope_theta": 500000.0, "max_sequence_length": 4096, **_LLADA_IDS}),
    "dream-7b": ("dream", {"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
                           "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
                           "rope_theta": 1000000.0, "max_position_embeddings": 131072,
                           "mask_token_id": 151666, "eos_token_id": 151643, "pad_token_id": 151643}),
    "llada-1b": ("llada", {"d_model": 2048, "n_layers": 16, "n_heads": 16, "n_kv_heads": 16,
                           "mlp_hidden_size": 5632, "vocab_size": 32000, "embedding_size": 32000,
                           "rope_theta": 500000.0, "max_sequence_length": 4096,
                           "mask_token_id": 31999, "eos_token_id": 2, "pad_token_id": 2}),
    # SDAR-8B-Chat (Qwen3-8B's shape, block-causal with block size 4)
    "sdar-8b": ("sdar", {"hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32,
                         "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288,
                         "vocab_size": 151936, "rope_theta": 1000000.0, "max_position_embeddings": 40960,
                         "block_size": 4, "mask_token_id": 151669, "eos_token_id": 151643,
                         "pad_token_id": 151643}),
    # LLaDA2.0-mini (16B total, ~1.4B active: 256 experts of 512, top-8, one shared; layer 0 dense)
    "llada2-mini": ("llada2_moe", {"hidden_size": 2048, "num_hidden_layers": 20, "num_attention_heads": 16,
                                   "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 5120,
                                   "moe_intermediate_size": 512, "num_experts": 256, "num_experts_per_tok": 8,
                                   "n_group": 8, "topk_group": 4, "num_shared_experts": 1,
                                   "first_k_dense_replace": 1, "routed_scaling_factor": 2.5,
                                   "partial_rotary_factor": 0.5, "vocab_size": 157184, "rope_theta": 600000.0,
                                   "max_position_embeddings": 16384, "use_qk_norm": True, "use_bias": False,
                                   "mask_token_id": 156895, "eos_token_id": 156892, "pad_token_id": 156892}),
    # seconds-sized stand-ins with the same families, for `--tiny` (the suite runs them on CPU)
    "tiny-llada": ("llada", {"d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4,
                             "mlp_hidden_size": 128, "vocab_size": 512, "embedding_size": 512,
                             "max_sequence_length": 1024, "mask_token_id": 511, "eos_token_id": 2,
                             "pad_token_id": 2}),
    "tiny-dream": ("dream", {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                             "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 512,
                             "max_position_embeddings": 1024, "mask_token_id": 511, "eos_token_id": 2,
                             "pad_token_id": 2}),
    "tiny-sdar": ("sdar", {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                           "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 512,
                           "max_position_embeddings": 1024, "block_size": 4, "mask_token_id": 511,
                           "eos_token_id": 2, "pad_token_id": 2}),
    "tiny-llada2": ("llada2_moe", {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                                   "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
                                   "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2,
                                   "n_group": 2, "topk_group": 1, "num_shared_experts": 1,
                                   "first_k_dense_replace": 1, "vocab_size": 512, "max_position_embeddings": 1024,
                                   "use_bias": False, "mask_token_id": 511, "eos_token_id": 2, "pad_token_id": 2}),
}
REAL_SHAPES = ("llada-8b", "dream-7b", "llada-1b")
TINY_SHAPES = ("tiny-llada", "tiny-dream")


def shape_config(name: str):
    """The ArchConfig of a named shape, parsed by its family."""
    if name not in SHAPES:
        raise ValueError(f"unknown model shape {name!r}; known: {sorted(SHAPES)}")
    family, raw = SHAPES[name]
    return FAMILIES[family].parse_config(raw)


@torch.no_grad()
def build_random_model(name: str, *, device: torch.device, dtype: torch.dtype,
                       seed: int = 0) -> DiffusionTransformer:
    """A random-weight model of shape ``name`` directly on ``device`` in ``dtype``.

    Weights ~ N(0, 1/fan_in) (embeddings N(0, 1), norms 1, biases 0): activations keep their
    scale through the layers, as in a trained model, so no overflow in half precision."""
    cfg = shape_config(name)
    with torch.device("meta"):
        model = DiffusionTransformer(cfg).to(dtype)
    model = model.to_empty(device=device)
    gen = torch.Generator(device=device).manual_seed(seed)
    for pname, p in model.named_parameters():
        if pname.endswith("norm.weight"):
            p.fill_(1.0)
        elif pname.endswith("bias"):
            p.zero_()
        elif pname == "embed.weight":
            p.normal_(0.0, 1.0, generator=gen)
        else:
            p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]), generator=gen)
    for buf in model.buffers():  # none today; any added later must not stay uninitialised
        buf.zero_()
    return model.eval().requires_grad_(False)


def parameter_bytes(model: DiffusionTransformer) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())
