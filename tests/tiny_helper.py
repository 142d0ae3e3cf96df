"""A tiny random Qwen2-layout causal LM written by transformers' own classes, on the tokenizer
of a given checkpoint: the autoregressive helper of the tests (APD's verifier)."""
from __future__ import annotations

import shutil
from pathlib import Path


def write_tiny_helper(out: Path, tokenizer_dir: Path, *, seed: int = 0, vocab_size: int | None = None) -> Path:
    """config.json + model.safetensors by ``Qwen2ForCausalLM.save_pretrained``, and the tokenizer
    files of ``tokenizer_dir``; ``vocab_size``: embedding rows (default: the tokenizer's size)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from dllm.models.tokenizer import load_tokenizer

    out.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / name, out / name)
    tokenizer = load_tokenizer(out)
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=vocab_size or len(tokenizer), hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                         max_position_embeddings=512, tie_word_embeddings=False,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():  # logits of a spread that makes helpers disagree with the drafts now and then
        model.lm_head.weight.normal_(0.0, 0.5)
    model.save_pretrained(out, safe_serialization=True)
    return out
