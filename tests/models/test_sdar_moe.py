"""SDAR-30B-A3B-Chat (``SDARMoeForCausalLM``, ``model_type: "sdar_moe"``): SDAR's block diffusion on
Qwen3-MoE layers. Its remote ``modeling_sdar_moe.py`` is transformers' Qwen3-MoE with SDAR's block
mask (JetAstra/SDAR, whose JetEngine ``models/sdar_moe.py`` reads the same names): per layer a
router ``mlp.gate`` and one tensor per expert ``mlp.experts.{e}.{gate,up,down}_proj``, softmax
routing over all experts in float32, top ``num_experts_per_tok``, renormalised when
``norm_topk_prob``; a layer is MoE unless listed in ``mlp_only_layers`` or off the
``decoder_sparse_step`` grid (then a dense MLP of ``intermediate_size``).

The tiny checkpoint's config.json keeps the Qwen3-MoE keys of the published config with sizes and
token ids shrunk; its tensors are named here by that rule, not by dllm, and the logits are
checked against a plain-torch reading of them.
"""
from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import save_file

from dllm.models import CheckpointError, load_model
from dllm.models.visibility import KeyVisibility
from tests.models.test_parity_families import _experts, _rel, _spans, _swiglu, qwen_decoder

BLOCK = 4


def _config(**changes) -> dict:
    """SDAR-30B-A3B-Chat's config.json keys (Qwen3-30B-A3B's plus SDAR's block_size and mask id), shrunk."""
    raw = {
        "architectures": ["SDARMoeForCausalLM"], "model_type": "sdar_moe",
        "auto_map": {"AutoConfig": "configuration_sdar_moe.SDARMoeConfig",
                     "AutoModelForCausalLM": "modeling_sdar_moe.SDARMoeForCausalLM"},
        "attention_bias": False, "attention_dropout": 0.0, "block_size": BLOCK, "bos_token_id": 1,
        "decoder_sparse_step": 1, "eos_token_id": 1, "head_dim": 32, "hidden_act": "silu", "hidden_size": 64,
        "initializer_range": 0.02, "intermediate_size": 96, "mask_token_id": 255, "max_position_embeddings": 1024,
        "max_window_layers": 48, "mlp_only_layers": [], "moe_intermediate_size": 32, "norm_topk_prob": True,
        "num_attention_heads": 4, "num_experts": 8, "num_experts_per_tok": 2, "num_hidden_layers": 3,
        "num_key_value_heads": 2, "output_router_logits": False, "pad_token_id": 1, "rms_norm_eps": 1e-06,
        "rope_scaling": None, "rope_theta": 1000000, "router_aux_loss_coef": 0.001, "sliding_window": None,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False,
        "vocab_size": 256,
    }
    raw.update(changes)
    return raw


def _is_moe(cfg: dict, i: int) -> bool:
    return i not in cfg["mlp_only_layers"] and cfg["num_experts"] > 0 and (i + 1) % cfg["decoder_sparse_step"] == 0


def _tensors(cfg: dict, seed: int) -> dict[str, torch.Tensor]:
    """Random tensors under Qwen3-MoE's names and shapes."""
    g = torch.Generator().manual_seed(seed)
    d, hd, H, Hkv = cfg["hidden_size"], cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]

    def lin(rows, cols):
        return torch.randn(rows, cols, generator=g) * (1.5 / math.sqrt(cols))

    def norm(n):
        return 1.0 + 0.1 * torch.randn(n, generator=g)

    def mlp(prefix, hidden):
        return {f"{prefix}gate_proj.weight": lin(hidden, d), f"{prefix}up_proj.weight": lin(hidden, d),
                f"{prefix}down_proj.weight": lin(d, hidden)}

    out = {"model.embed_tokens.weight": torch.randn(cfg["vocab_size"], d, generator=g),
           "model.norm.weight": norm(d), "lm_head.weight": lin(cfg["vocab_size"], d)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": norm(d), p + "post_attention_layernorm.weight": norm(d),
                    p + "self_attn.q_proj.weight": lin(H * hd, d), p + "self_attn.k_proj.weight": lin(Hkv * hd, d),
                    p + "self_attn.v_proj.weight": lin(Hkv * hd, d), p + "self_attn.o_proj.weight": lin(d, H * hd),
                    p + "self_attn.q_norm.weight": norm(hd), p + "self_attn.k_norm.weight": norm(hd)})
        if _is_moe(cfg, i):
            out[p + "mlp.gate.weight"] = lin(cfg["num_experts"], d)
            for e in range(cfg["num_experts"]):
                out.update(mlp(f"{p}mlp.experts.{e}.", cfg["moe_intermediate_size"]))
        else:
            out.update(mlp(p + "mlp.", cfg["intermediate_size"]))
    return out


def _write(path, cfg: dict, seed: int = 5):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(cfg))
    save_file(_tensors(cfg, seed), str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def _moe(h, W, p, cfg):
    """Qwen3-MoE's sparse block: float32 softmax over every expert, top-k, renormalised if asked."""
    flat = h.reshape(-1, h.shape[-1])
    probs = (flat @ W[p + "mlp.gate.weight"].T).float().softmax(-1)
    w, idx = probs.topk(cfg["num_experts_per_tok"], dim=-1)
    if cfg["norm_topk_prob"]:
        w = w / w.sum(-1, keepdim=True)
    return _experts(flat, W, p + "mlp.", w, idx).view_as(h)


def reference_sdar_moe(path, ids, pos, valid, block):
    def mlp(h, W, p, cfg, i):
        return _moe(h, W, p, cfg) if _is_moe(cfg, i) else _swiglu(h, W, p + "mlp.")

    return qwen_decoder(path, ids, pos, valid, block, lambda cfg: (cfg["head_dim"], cfg["head_dim"]), mlp)


@pytest.mark.parametrize("changes", [
    {},
    {"mlp_only_layers": [1], "norm_topk_prob": False},  # a dense layer between MoE layers
    {"decoder_sparse_step": 2},  # MoE on every second layer only
])
def test_sdar_moe_logits_match_a_plain_reading_of_its_tensors(tmp_path, changes):
    cfg = _config(**changes)
    path = _write(tmp_path / "m", cfg)
    model = load_model(path)
    assert model.config.moe_layers == tuple(i for i in range(cfg["num_hidden_layers"]) if _is_moe(cfg, i))
    assert (model.config.attention, model.config.block_size, model.config.mask_token_id) == ("block_causal", 4, 255)
    ids = torch.randint(0, 250, (2, 11), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(11).expand(2, -1)
    valid = torch.ones(2, 11, dtype=torch.bool)
    with torch.no_grad():
        ours = model(ids, pos, KeyVisibility(valid=valid, spans=_spans(11, BLOCK)))
    assert _rel(ours, reference_sdar_moe(path, ids, pos, valid, BLOCK)) < 1e-5


def test_a_missing_expert_of_sdar_moe_is_named(tmp_path):
    cfg = _config()
    path = tmp_path / "m"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(cfg))
    tensors = _tensors(cfg, 5)
    del tensors["model.layers.2.mlp.experts.7.down_proj.weight"]
    save_file(tensors, str(path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"missing tensors: \['model\.layers\.2\.mlp\.experts\.7\.down_proj\.weight'\]"):
        load_model(path)
