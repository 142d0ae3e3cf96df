"""The block-causal and MoE shapes of the GPU check: SDAR-8B (Qwen3-8B's shape) and LLaDA2.0-mini
(16B total), built on the meta device to count parameters against the published sizes, and their
tiny stand-ins built and decoded on CPU."""
from __future__ import annotations

import pytest
import torch

from dllm import GenerationConfig
from dllm.bench.random_models import build_random_model, shape_config
from dllm.engine.decoding import decode
from dllm.models.transformer import DiffusionTransformer


def _parameters(name: str) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in DiffusionTransformer(shape_config(name)).parameters())


def test_real_block_causal_and_moe_shapes_have_their_published_sizes():
    assert 8.1e9 < _parameters("sdar-8b") < 8.3e9  # Qwen3-8B: 8.2B with untied embeddings
    assert 16.0e9 < _parameters("llada2-mini") < 16.5e9  # LLaDA2.0-mini: "16B" (Ling-mini-2.0: 16.26B)
    sdar, mini = shape_config("sdar-8b"), shape_config("llada2-mini")
    assert sdar.attention == mini.attention == "block_causal" and (sdar.block_size, mini.block_size) == (4, 32)
    assert mini.moe_layers == tuple(range(1, 20)) and mini.moe.n_experts == 256 and mini.moe.top_k == 8


@pytest.mark.parametrize("name", ["tiny-sdar", "tiny-llada2"])
def test_tiny_stand_ins_decode_with_the_dual_cache(name):
    model = build_random_model(name, device=torch.device("cpu"), dtype=torch.float32)
    config = GenerationConfig(gen_length=8, block_length=4, steps=8, cache="dual", stop_at_eos=False)
    batch = decode(model, [[5, 6, 7], [8, 9]], config)
    alone = decode(model, [[8, 9]], config)
    assert batch.answer[1].tolist() == alone.answer[0].tolist()
    assert (batch.order >= 0).all()  # every position committed by a forward
