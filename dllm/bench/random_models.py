"""Random-weight models of real shapes (LLaDA-8B, Dream-7B, a ~1B LLaDA), built on the device.

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
    # seconds-sized stand-ins with the same families, for `--tiny` (the suite runs them on CPU)
    "tiny-llada": ("llada", {"d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4,
                             "mlp_hidden_size": 128, "vocab_size": 512, "embedding_size": 512,
                             "max_sequence_length": 1024, "mask_token_id": 511, "eos_token_id": 2,
                             "pad_token_id": 2}),
    "tiny-dream": ("dream", {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                             "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 512,
                             "max_position_embeddings": 1024, "mask_token_id": 511, "eos_token_id": 2,
                             "pad_token_id": 2}),
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
