"""Tiny random DiffusionGemma checkpoints written by transformers' own classes (the oracle).

Three layers (two sliding, one full with its own head size and one K/V head), four experts,
a sliding window shorter than the prompts the tests use, a tiny vision tower (the loader must
skip it) and a byte-level BPE tokenizer with Gemma's special tokens first (pad 0, eos 1, bos 2),
as many rows as the tokenizer has tokens.
Every weight, norm and scale is perturbed away from its initial value so that each one matters.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dllm.data.bpe import save_tokenizer_dir, train_bpe

SPECIALS = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>", "<image>"]
TEMPLATE = ("{{ bos_token }}{% for message in messages %}<start_of_turn>{{ message['role'] }}\n"
            "{{ message['content'] }}<end_of_turn>\n{% endfor %}"
            "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
CORPUS = ["the quick brown fox jumps over the lazy dog", "uniform state diffusion renoises rejected tokens",
          "1, 2, 3, 4, 5, 6, 7, 8, 9, 10"] * 4
CANVAS = 8
SLIDING_WINDOW = 8


def reference_classes():
    """transformers' DiffusionGemma classes, or a skip naming what is missing."""
    try:
        from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion
    except ImportError:
        pytest.skip("the installed transformers has no models/diffusion_gemma (it came in 5.17)")
    return DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion


def write_reference(out: Path, *, seed: int = 0, max_shard_size: str | None = "60KB", std: float = 0.15,
                    **text_overrides):
    """Write a tiny checkpoint with ``save_pretrained`` (sharded by default) plus a tokenizer;
    returns the reference model in eval mode."""
    config_cls, model_cls = reference_classes()
    tok = train_bpe(CORPUS, vocab_size=300, special_tokens=SPECIALS)
    text = dict(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
                num_global_key_value_heads=1, sliding_window=SLIDING_WINDOW,
                layer_types=["sliding_attention", "sliding_attention", "full_attention"], num_experts=4,
                top_k_experts=2, moe_intermediate_size=32, max_position_embeddings=512, pad_token_id=0,
                eos_token_id=1, bos_token_id=2)
    text.update(text_overrides)
    vision = dict(model_type="gemma4_vision", hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=2, head_dim=8, position_embedding_size=16,
                  patch_size=4)
    config = config_cls(text_config=text, vision_config=vision, canvas_length=CANVAS, image_token_id=5,
                        boi_token_id=3, eoi_token_id=4)
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "scale" in name or "norm" in name:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, std)
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.uniform_(0.5, 1.5)
    kwargs = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(out, **kwargs)
    save_tokenizer_dir(tok, out, special={"pad_token": "<pad>", "eos_token": "<eos>", "bos_token": "<bos>"},
                       chat_template=TEMPLATE)
    return model
