"""Logits of the dllm modules equal an independent plain-torch reading of the checkpoint.

The reference below is written from the published forward math (LLaDA: OLMo-style block with
RoPE rotated in fp32; Dream: Qwen2 with q/k/v bias, GQA and tables cast to the activation dtype),
reading tensors by their original names: it shares no code with dllm.models.
"""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from dllm.models import load_model
from dllm.models.visibility import KeyVisibility


def _weights(path):
    files = sorted(path.glob("*.safetensors"))
    out = {}
    for f in files:
        out.update(load_file(str(f)))
    return out


def _rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rope(x, pos, theta):
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = pos.double()[..., None] * inv  # (B, T, d/2)
    cos, sin = ang.cos().float()[:, None], ang.sin().float()[:, None]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([x1 * cos[..., : d // 2] - x2 * sin[..., : d // 2],
                      x2 * cos[..., : d // 2] + x1 * sin[..., : d // 2]], -1)


def _attend(q, k, v, key_valid):
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    scores = scores.masked_fill(~key_valid[:, None, None, :], float("-inf"))
    return scores.softmax(-1) @ v


def reference_llada(path, ids, pos, key_valid):
    cfg = json.loads((path / "config.json").read_text())
    W = _weights(path)
    H, L, eps = cfg["n_heads"], cfg["n_layers"], cfg["rms_norm_eps"]
    x = W["model.transformer.wte.weight"][ids]
    B, T, D = x.shape
    for i in range(L):
        p = f"model.transformer.blocks.{i}."
        h = _rms(x, W[p + "attn_norm.weight"], eps)
        q = (h @ W[p + "q_proj.weight"].T).view(B, T, H, -1).transpose(1, 2)
        k = (h @ W[p + "k_proj.weight"].T).view(B, T, H, -1).transpose(1, 2)
        v = (h @ W[p + "v_proj.weight"].T).view(B, T, H, -1).transpose(1, 2)
        q, k = _rope(q, pos, cfg["rope_theta"]), _rope(k, pos, cfg["rope_theta"])
        a = _attend(q, k, v, key_valid).transpose(1, 2).reshape(B, T, D)
        x = x + a @ W[p + "attn_out.weight"].T
        h = _rms(x, W[p + "ff_norm.weight"], eps)
        gate = h @ W[p + "ff_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * (h @ W[p + "up_proj.weight"].T)) @ W[p + "ff_out.weight"].T
    x = _rms(x, W["model.transformer.ln_f.weight"], eps)
    return x @ W["model.transformer.ff_out.weight"].T


def reference_dream(path, ids, pos, key_valid):
    cfg = json.loads((path / "config.json").read_text())
    W = _weights(path)
    H, Hkv, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rms_norm_eps"]
    x = W["model.embed_tokens.weight"][ids]
    B, T, D = x.shape
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        lin = lambda h, n: h @ W[p + n + ".weight"].T + W[p + n + ".bias"]  # noqa: E731
        h = _rms(x, W[p + "input_layernorm.weight"], eps)
        q = lin(h, "self_attn.q_proj").view(B, T, H, -1).transpose(1, 2)
        k = lin(h, "self_attn.k_proj").view(B, T, Hkv, -1).transpose(1, 2)
        v = lin(h, "self_attn.v_proj").view(B, T, Hkv, -1).transpose(1, 2)
        q, k = _rope(q, pos, cfg["rope_theta"]), _rope(k, pos, cfg["rope_theta"])
        k, v = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
        a = _attend(q, k, v, key_valid).transpose(1, 2).reshape(B, T, D)
        x = x + a @ W[p + "self_attn.o_proj.weight"].T
        h = _rms(x, W[p + "post_attention_layernorm.weight"], eps)
        m = torch.nn.functional.silu(h @ W[p + "mlp.gate_proj.weight"].T) * (h @ W[p + "mlp.up_proj.weight"].T)
        x = x + m @ W[p + "mlp.down_proj.weight"].T
    x = _rms(x, W["model.norm.weight"], eps)
    return x @ W["lm_head.weight"].T


REFERENCES = {"llada": reference_llada, "dream": reference_dream}


@pytest.mark.parametrize("name", ["llada", "dream", "llada_sharded", "dream_sharded"])
def test_logits_match_independent_reference(tiny_dirs, name):
    path = tiny_dirs[name]
    model = load_model(path)
    ref = REFERENCES[name.split("_")[0]]
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 250, (2, 11), generator=g)
    pos = torch.arange(11).expand(2, -1)
    valid = torch.ones(2, 11, dtype=torch.bool)
    ours = model(ids, pos, KeyVisibility(valid=valid))
    theirs = ref(path, ids, pos, valid)
    rel = (ours - theirs).norm() / theirs.norm()
    assert rel < 1e-5, f"relative error {rel:.2e}"


@pytest.mark.parametrize("name", ["llada", "dream"])
def test_left_padded_row_matches_its_unpadded_run(tiny_dirs, name):
    """A left-padded row sees the positions it would see alone, so its logits are unchanged."""
    path = tiny_dirs[name]
    model = load_model(path)
    g = torch.Generator().manual_seed(1)
    short = torch.randint(0, 250, (1, 6), generator=g)
    long_ = torch.randint(0, 250, (1, 9), generator=g)
    pad = 3
    batch = torch.cat([torch.cat([torch.zeros(1, pad, dtype=torch.long), short], 1), long_])
    valid = torch.ones(2, 9, dtype=torch.bool)
    valid[0, :pad] = False
    pos = (valid.long().cumsum(-1) - 1).clamp_min(0)
    out = model(batch, pos, KeyVisibility(valid=valid))
    alone = model(short, torch.arange(6)[None])
    ref = REFERENCES[name](path, batch, pos, valid)
    assert torch.allclose(out[0, pad:], alone[0], rtol=1e-5, atol=1e-5)
    rel = (out[:, :][valid] - ref[valid]).norm() / ref[valid].norm()
    assert rel < 1e-5
