"""Random checkpoints of each family in the original on-disk format, any size.

Real tensor names, real config keys, a real ``tokenizers`` tokenizer and tokenizer_config:
the loader is exercised exactly as on LLaDA-8B or Dream-7B. Used by tests and benchmarks.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file

from dllm.data.bpe import save_tokenizer_dir, train_bpe
from dllm.models.registry import FAMILIES, weight_map

LLADA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}"
    "<|end_header_id|>\n\n{{ message['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a masked diffusion language model decodes many tokens per forward",
    "Alice Smith, Bob Jones, Carol White and Dan Brown wait in line",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10 [A, B, C, D]",
]
_SPECIALS = {
    "llada": ["<|startoftext|>", "<|endoftext|>", "<|mdm_mask|>", "<|start_header_id|>",
              "<|end_header_id|>", "<|eot_id|>"],
    "dream": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|beginoftext|>", "<|mask|>"],
}


# Roles of the special tokens and the chat template of each tokenizer layout, as in
# LLaDA-8B-Instruct and Dream-7B-Instruct (also used by dllm.train.train_small).
SPECIAL_ROLES = {
    "llada": {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>",
              "pad_token": "<|endoftext|>", "mask_token": "<|mdm_mask|>"},
    "dream": {"bos_token": "<|beginoftext|>", "eos_token": "<|endoftext|>",
              "pad_token": "<|endoftext|>", "mask_token": "<|mask|>"},
}
CHAT_TEMPLATES = {"llada": LLADA_CHAT_TEMPLATE, "dream": CHATML_TEMPLATE}


def _tokenizer(family: str, out: Path):
    tok = train_bpe(_CORPUS * 4, vocab_size=300, special_tokens=_SPECIALS[family])
    special = SPECIAL_ROLES[family]
    save_tokenizer_dir(tok, out, special=special, chat_template=CHAT_TEMPLATES[family])
    return tok, special


def _config(family: str, tok, special, *, d_model, n_layers, n_heads, n_kv_heads, mlp_hidden,
            vocab_size, max_len) -> dict:
    ids = {k: tok.token_to_id(v) for k, v in special.items()}
    vocab = max(vocab_size, tok.get_vocab_size())
    if family == "llada":
        return {
            "model_type": "llada", "architectures": ["LLaDAModelLM"],
            "auto_map": {"AutoConfig": "configuration_llada.LLaDAConfig",
                         "AutoModel": "modeling_llada.LLaDAModelLM"},
            "d_model": d_model, "n_layers": n_layers, "n_heads": n_heads,
            "n_kv_heads": n_kv_heads, "mlp_hidden_size": mlp_hidden, "mlp_ratio": 4,
            "vocab_size": vocab, "embedding_size": vocab, "rope_theta": 500000.0,
            "rope_full_precision": True, "rms_norm_eps": 1e-5, "max_sequence_length": max_len,
            "weight_tying": False, "include_bias": False, "include_qkv_bias": False,
            "block_type": "llama", "activation_type": "silu", "layer_norm_type": "rms",
            "mask_token_id": ids["mask_token"], "eos_token_id": ids["eos_token"],
            "pad_token_id": ids["pad_token"], "use_cache": False,
        }
    return {
        "model_type": "Dream", "architectures": ["DreamModel"],
        "auto_map": {"AutoConfig": "configuration_dream.DreamConfig",
                     "AutoModel": "modeling_dream.DreamModel"},
        "hidden_size": d_model, "num_hidden_layers": n_layers, "num_attention_heads": n_heads,
        "num_key_value_heads": n_kv_heads, "intermediate_size": mlp_hidden, "hidden_act": "silu",
        "vocab_size": vocab, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "max_position_embeddings": max_len, "tie_word_embeddings": False,
        "mask_token_id": ids["mask_token"], "eos_token_id": ids["eos_token"],
        "pad_token_id": ids["pad_token"], "bos_token_id": ids["bos_token"], "use_cache": False,
    }


def write_tiny_checkpoint(
    out_dir: str | Path,
    family: str = "llada",
    *,
    d_model: int = 64,
    n_layers: int = 2,
    n_heads: int = 4,
    n_kv_heads: int | None = None,
    mlp_hidden: int = 128,
    vocab_size: int = 0,
    max_len: int = 1024,
    num_shards: int = 1,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    block_size: int = 8,
) -> Path:
    """Write a random ``family`` checkpoint (config.json, safetensors, tokenizer) to out_dir."""
    if family not in ("llada", "dream", "fast_dllm_v2"):
        raise ValueError(f"tiny checkpoints exist for 'llada', 'dream' and 'fast_dllm_v2', not {family!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if n_kv_heads is None:
        n_kv_heads = n_heads if family == "llada" else max(1, n_heads // 2)
    qwen = family != "llada"
    tok, special = _tokenizer("dream" if qwen else "llada", out)
    raw = _config("dream" if qwen else "llada", tok, special, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                  n_kv_heads=n_kv_heads, mlp_hidden=mlp_hidden, vocab_size=vocab_size,
                  max_len=max_len)
    if family == "fast_dllm_v2":
        raw.update(model_type="Fast_dLLM_Qwen", architectures=["Fast_dLLM_QwenForCausalLM"], bd_size=block_size)
    (out / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    fam = FAMILIES[family]
    cfg = fam.parse_config(raw)
    from dllm.models.transformer import DiffusionTransformer

    with torch.device("meta"):
        shapes = {k: v.shape for k, v in DiffusionTransformer(cfg).state_dict().items()}
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for ckpt, module in weight_map(fam, cfg).items():
        shape = shapes[module]
        if module.endswith("norm.weight"):
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        elif module.endswith("bias"):
            t = 0.1 * torch.randn(shape, generator=gen)
        elif module == "embed.weight":
            t = torch.randn(shape, generator=gen)
        else:  # scaled so that random logits are peaked enough to avoid near-ties
            t = torch.randn(shape, generator=gen) * (1.5 / math.sqrt(shape[-1]))
        tensors[ckpt] = t.to(dtype).contiguous()
    _save(tensors, out, num_shards)
    return out


def _save(tensors: dict[str, torch.Tensor], out: Path, num_shards: int) -> None:
    if num_shards <= 1:
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
        return
    names = list(tensors)
    weight_map_, total = {}, 0
    for s in range(num_shards):
        fname = f"model-{s + 1:05d}-of-{num_shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s::num_shards]}
        save_file(part, str(out / fname), metadata={"format": "pt"})
        weight_map_.update({n: fname for n in part})
        total += sum(t.numel() * t.element_size() for t in part.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map_}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
