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
from dllm.models import tiny_formats
from dllm.models.registry import FAMILIES, tensor_sources
from dllm.models.sources import to_checkpoint

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
    if family in tiny_formats.TOKENIZER_LAYOUTS:
        specials, special, template = tiny_formats.TOKENIZER_LAYOUTS[family]
    else:
        specials, special, template = _SPECIALS[family], SPECIAL_ROLES[family], CHAT_TEMPLATES[family]
    tok = train_bpe(_CORPUS * 4, vocab_size=300, special_tokens=specials)
    save_tokenizer_dir(tok, out, special=special, chat_template=template)
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
    block_size: int = 0,
    n_experts: int = 4,
    top_k: int = 2,
    expert_hidden: int = 32,
) -> Path:
    """Write a random ``family`` checkpoint (config.json, safetensors, tokenizer) to out_dir.

    ``block_size``: block-causal families only (0: the family's default: 8 for the tiny
    Fast-dLLM v2, SDAR's 4), and DiffusionGemma's canvas_length (default 8). ``n_experts`` / ``top_k`` / ``expert_hidden``: MoE families only
    (LLaDA2: layer 0 dense, one shared expert; LLaDA-MoE: every layer MoE, a shared expert)."""
    if family not in FAMILIES or family not in ("llada", "dream", "fast_dllm_v2", *tiny_formats.TOKENIZER_LAYOUTS):
        raise ValueError(f"tiny checkpoints exist for 'llada', 'dream', 'fast_dllm_v2' and "
                         f"{sorted(tiny_formats.TOKENIZER_LAYOUTS)}, not {family!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if n_kv_heads is None:
        n_kv_heads = n_heads if family in ("llada", "llada_moe") else max(1, n_heads // 2)
    layout = family if family in tiny_formats.TOKENIZER_LAYOUTS else "llada" if family == "llada" else "dream"
    tok, special = _tokenizer(layout, out)
    sizes = dict(d_model=d_model, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, mlp_hidden=mlp_hidden)
    vocab = max(vocab_size, tok.get_vocab_size())
    ids = {k: tok.token_to_id(v) for k, v in special.items()}
    moe = dict(n_experts=n_experts, top_k=top_k, expert_hidden=expert_hidden)
    if family == "sdar":
        raw = tiny_formats.sdar_config(ids, **sizes, vocab=vocab, max_len=max_len, block_size=block_size or 4)
    elif family == "llada2_moe":
        raw = tiny_formats.llada2_config(ids, **sizes, vocab=vocab, max_len=max_len, **moe)
    elif family == "llada_moe":
        raw = tiny_formats.llada_moe_config(ids, **sizes, vocab=vocab, max_len=max_len, **moe)
    elif family == "diffusion_gemma":
        raw = tiny_formats.diffusion_gemma_config(ids, **sizes, vocab=vocab, max_len=max_len, **moe,
                                                  canvas_length=block_size or 8, image_id=tok.token_to_id("<image>"))
    else:
        raw = _config(layout, tok, special, **sizes, vocab_size=vocab_size, max_len=max_len)
    if family == "fast_dllm_v2":
        raw.update(model_type="Fast_dLLM_Qwen", architectures=["Fast_dLLM_QwenForCausalLM"], bd_size=block_size or 8)
    # the tensors' dtype, declared as a published checkpoint does: dtype="auto" then loads it on
    # every device (undeclared, a GPU loads bfloat16, and the tests' float32 tolerances break there)
    raw["dtype" if "dtype" in raw else "torch_dtype"] = str(dtype).removeprefix("torch.")
    (out / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    fam = FAMILIES[family]
    cfg = fam.parse_config(raw)
    sources = tensor_sources(fam, cfg)
    _save(to_checkpoint(sources, _random_state(cfg, list(sources), seed, dtype, fam.build_model)), out, num_shards)
    return out


def _random_state(cfg, modules: list[str], seed: int, dtype: torch.dtype, build=None) -> dict[str, torch.Tensor]:
    """Random module tensors, drawn in ``modules`` order (checkpoint order, so the dense
    families' tiny checkpoints stay as they were): norms and scales near 1, small biases, unit
    embeddings, projections scaled so that random logits are peaked enough to avoid near-ties.
    ``build``: the family's own module (``Family.build_model``), else the shared transformer."""
    from dllm.models.transformer import DiffusionTransformer

    with torch.device("meta"):
        shapes = {k: v.shape for k, v in (build or DiffusionTransformer)(cfg).state_dict().items()}
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for module in modules:
        shape = shapes[module]
        if module.endswith(("norm.weight", "scale", "scalar")):  # DiffusionGemma's router / expert / layer scales
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        elif module.endswith("bias"):  # q/k/v/o biases and MoE routing biases
            t = 0.1 * torch.randn(shape, generator=gen)
        elif module == "embed.weight":
            t = torch.randn(shape, generator=gen)
        else:
            t = torch.randn(shape, generator=gen) * (1.5 / math.sqrt(shape[-1]))
        state[module] = t.to(dtype).contiguous()
    return state


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
