"""SDAR, LLaDA2.x and LLaDA-MoE logits equal plain-torch readings of their checkpoints.

Each reference is written from the family's published modeling code (JetAstra/SDAR
``modeling_sdar.py``; LLaDA2's ``modeling_llada2_moe.py``; LLaDA-MoE's ``modeling_lladamoe.py``),
reads the safetensors by their original names (fused ``query_key_value``, one tensor per expert)
and builds a dense (queries x keys) mask: it shares no code with dllm.models. Block-causal
families are checked under their block partition, left-padded rows included.
"""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from dllm.models import load_model
from dllm.models.tiny import write_tiny_checkpoint
from dllm.models.visibility import KeyVisibility


def _weights(path):
    out = {}
    for f in sorted(path.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def _rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rope(x, pos, theta, rot):
    """NeoX rotation of the first ``rot`` dims of each head; x (B, H, T, D)."""
    inv = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    ang = pos.double()[..., None] * inv
    cos, sin = ang.cos().float()[:, None], ang.sin().float()[:, None]
    h = rot // 2
    x1, x2, rest = x[..., :h], x[..., h:rot], x[..., rot:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], -1)


def _attention(q, k, v, allowed):
    """q (B, H, T, D), k / v (B, Hkv, T, D); allowed (B, T, T) bool."""
    allowed = allowed | torch.eye(allowed.shape[-1], dtype=torch.bool)  # pad queries: no NaN
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    return scores.softmax(-1) @ v


def _swiglu(h, W, p):
    return (F.silu(h @ W[p + "gate_proj.weight"].T) * (h @ W[p + "up_proj.weight"].T)) @ W[p + "down_proj.weight"].T


def _experts(flat, W, p, w, idx):
    """Each token's chosen experts ``{p}experts.{e}.`` (SwiGLU) weighted by ``w``, summed; flat (N, d)."""
    out = torch.zeros_like(flat)
    for t in range(flat.shape[0]):
        for j in range(idx.shape[1]):
            out[t] += w[t, j] * _swiglu(flat[t], W, p + f"experts.{int(idx[t, j])}.")
    return out


def _allowed(valid, block):
    """Key validity (B, T) and, with ``block``, block-causal visibility over canvas columns."""
    T = valid.shape[1]
    allowed = valid[:, None, :].expand(-1, T, -1)
    if block:
        idx = torch.arange(T) // block
        allowed = allowed & (idx[None, :] <= idx[:, None])
    return allowed


def _self_attention(h, W, p, heads, pos, theta, eps, allowed):
    """Qwen3-style attention under ``self_attn.``: per-head RMSNorm on q and k, RoPE on the first
    ``rot`` dims of each head, then o_proj. heads = (H, H_kv, head_dim, rot)."""
    H, Hkv, D, rot = heads
    B, T, _ = h.shape
    q = _rms((h @ W[p + "self_attn.q_proj.weight"].T).view(B, T, H, D), W[p + "self_attn.q_norm.weight"], eps)
    k = _rms((h @ W[p + "self_attn.k_proj.weight"].T).view(B, T, Hkv, D), W[p + "self_attn.k_norm.weight"], eps)
    v = (h @ W[p + "self_attn.v_proj.weight"].T).view(B, T, Hkv, D)
    q, k = _rope(q.transpose(1, 2), pos, theta, rot), _rope(k.transpose(1, 2), pos, theta, rot)
    a = _attention(q, k, v.transpose(1, 2), allowed).transpose(1, 2).reshape(B, T, H * D)
    return a @ W[p + "self_attn.o_proj.weight"].T


def qwen_decoder(path, ids, pos, valid, block, dims, mlp):
    """Logits of a Qwen3-named decoder (``model.embed_tokens``, ``model.layers.{i}.self_attn``):
    pre-norm attention (``_self_attention``; ``dims(cfg)``: head_dim and the dims RoPE rotates), then
    ``mlp(h, W, prefix, cfg, i)`` on the post-attention norm, the final norm and ``lm_head``."""
    cfg = json.loads((path / "config.json").read_text())
    W = _weights(path)
    H, Hkv, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rms_norm_eps"]
    D, rot = dims(cfg)
    x = W["model.embed_tokens.weight"][ids]
    allowed = _allowed(valid, block)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = _rms(x, W[p + "input_layernorm.weight"], eps)
        x = x + _self_attention(h, W, p, (H, Hkv, D, rot), pos, cfg["rope_theta"], eps, allowed)
        x = x + mlp(_rms(x, W[p + "post_attention_layernorm.weight"], eps), W, p, cfg, i)
    return _rms(x, W["model.norm.weight"], eps) @ W["lm_head.weight"].T


def reference_sdar(path, ids, pos, valid, block):
    return qwen_decoder(path, ids, pos, valid, block, lambda cfg: (cfg["head_dim"], cfg["head_dim"]),
                        lambda h, W, p, cfg, i: _swiglu(h, W, p + "mlp."))


def _llada2_moe(h, W, p, cfg):
    """LLaDA2 router: fp32 sigmoid scores, expert_bias for choosing only, group-limited top-k
    (a group scores the sum of its best two), chosen scores renormalised and scaled; plus the
    shared expert."""
    E, K = cfg["num_experts"], cfg["num_experts_per_tok"]
    G, TG = cfg["n_group"], cfg["topk_group"]
    flat = h.reshape(-1, h.shape[-1])
    scores = torch.sigmoid(flat @ W[p + "gate.weight"].T)
    choice = scores + W[p + "gate.expert_bias"]
    group = choice.view(-1, G, E // G).topk(2, dim=-1).values.sum(-1)
    keep = torch.zeros_like(group).scatter(1, group.topk(TG, dim=-1).indices, 1.0)
    keep = keep[:, :, None].expand(-1, -1, E // G).reshape(-1, E).bool()
    idx = choice.masked_fill(~keep, float("-inf")).topk(K, dim=-1).indices
    w = scores.gather(1, idx)
    w = w / (w.sum(-1, keepdim=True) + 1e-20) * cfg["routed_scaling_factor"]
    return _experts(flat, W, p, w, idx).view_as(h) + _swiglu(h, W, p + "shared_experts.")


def reference_llada2(path, ids, pos, valid, block):
    cfg = json.loads((path / "config.json").read_text())
    W = _weights(path)
    H, Hkv, D, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["rms_norm_eps"]
    rot = int(D * cfg["partial_rotary_factor"])
    x = W["model.word_embeddings.weight"][ids]
    B, T, _ = x.shape
    allowed = _allowed(valid, block)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = _rms(x, W[p + "input_layernorm.weight"], eps)
        qkv = (h @ W[p + "attention.query_key_value.weight"].T).view(B, T, H + 2 * Hkv, D)
        q, k, v = qkv.split([H, Hkv, Hkv], dim=2)
        q = _rms(q, W[p + "attention.query_layernorm.weight"], eps).transpose(1, 2)
        k = _rms(k, W[p + "attention.key_layernorm.weight"], eps).transpose(1, 2)
        q, k = _rope(q, pos, cfg["rope_theta"], rot), _rope(k, pos, cfg["rope_theta"], rot)
        a = _attention(q, k, v.transpose(1, 2), allowed).transpose(1, 2).reshape(B, T, H * D)
        x = x + a @ W[p + "attention.dense.weight"].T
        h = _rms(x, W[p + "post_attention_layernorm.weight"], eps)
        dense = i < cfg["first_k_dense_replace"]
        x = x + (_swiglu(h, W, p + "mlp.") if dense else _llada2_moe(h, W, p + "mlp.", cfg))
    return _rms(x, W["model.norm.weight"], eps) @ W["lm_head.weight"].T


def _llada_moe_mlp(h, W, p, cfg):
    """LLaDA-MoE router: fp32 softmax over the experts, top-k, no renormalisation."""
    K = cfg["num_experts_per_tok"]
    flat = h.reshape(-1, h.shape[-1])
    probs = (flat @ W[p + "mlp.gate.weight"].T).softmax(-1)
    w, idx = probs.topk(K, dim=-1)
    return _experts(flat, W, p + "mlp.", w, idx).view_as(h) + _swiglu(h, W, p + "shared_expert.")


def reference_llada_moe(path, ids, pos, valid, block):
    """head_dim is hidden / heads (the config's head_dim, if any, is not read by LLaDA-MoE)."""
    def dims(cfg):
        D = cfg["hidden_size"] // cfg["num_attention_heads"]
        return D, int(D * cfg["partial_rotary_factor"])

    def mlp(h, W, p, cfg, i):
        return _llada_moe_mlp(h, W, p, cfg) if cfg["moe_layer_freq"][i] else _swiglu(h, W, p + "mlp.")

    return qwen_decoder(path, ids, pos, valid, block, dims, mlp)


# family -> (reference, block size of its tiny checkpoint or 0 for bidirectional)
CASES = {
    "sdar": (reference_sdar, 4),
    "llada2_moe": (reference_llada2, 32),
    "llada_moe": (reference_llada_moe, 0),
}


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    dirs = {}
    for n, family in enumerate(CASES):
        dirs[family] = write_tiny_checkpoint(root / family, family, seed=10 + n)
        dirs[family + "_sharded"] = write_tiny_checkpoint(root / (family + "_sh"), family, seed=20 + n, num_shards=3)
    return dirs


def _spans(T, block):
    """The block-causal spans of a forward over canvas columns [0, T) (block 0 at column 0)."""
    return tuple((lo, min(lo + block, T), min(lo + block, T)) for lo in range(0, T, block)) if block else None


def _rel(ours, theirs):
    return float((ours - theirs).norm() / theirs.norm())


@pytest.mark.parametrize("name", [f + s for f in CASES for s in ("", "_sharded")])
def test_logits_match_independent_reference(family_dirs, name):
    family = name.removesuffix("_sharded")
    reference, block = CASES[family]
    path = family_dirs[name]
    model = load_model(path)
    block = min(block, 4) if block else 0  # several blocks inside an 11-token canvas
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 250, (2, 11), generator=g)
    pos = torch.arange(11).expand(2, -1)
    valid = torch.ones(2, 11, dtype=torch.bool)
    with torch.no_grad():
        ours = model(ids, pos, KeyVisibility(valid=valid, spans=_spans(11, block)))
    assert _rel(ours, reference(path, ids, pos, valid, block)) < 1e-5


@pytest.mark.parametrize("family", list(CASES))
def test_left_padded_rows_match_reference_and_their_unpadded_run(family_dirs, family):
    """Left padding masks the pad keys and shifts positions; block-causal families see the same
    partition of canvas columns in every row."""
    reference, block = CASES[family]
    block = min(block, 4) if block else 0
    path = family_dirs[family]
    model = load_model(path)
    g = torch.Generator().manual_seed(1)
    pad = 4 if block else 3  # a whole block of padding keeps the short row's partition
    short = torch.randint(0, 250, (1, 8), generator=g)
    long_ = torch.randint(0, 250, (1, 8 + pad), generator=g)
    batch = torch.cat([torch.cat([torch.zeros(1, pad, dtype=torch.long), short], 1), long_])
    T = batch.shape[1]
    valid = torch.ones(2, T, dtype=torch.bool)
    valid[0, :pad] = False
    pos = (valid.long().cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        out = model(batch, pos, KeyVisibility(valid=valid, spans=_spans(T, block)))
        alone = model(short, torch.arange(8)[None], KeyVisibility(spans=_spans(8, block)))
    assert torch.allclose(out[0, pad:], alone[0], rtol=1e-5, atol=1e-5)
    ref = reference(path, batch, pos, valid, block)
    assert _rel(out[valid], ref[valid]) < 1e-5


def test_block_causal_visibility_is_what_the_logits_see(family_dirs):
    """A changed token in a later block leaves earlier blocks' logits unchanged (and changes its
    own block's): SDAR really is block-causal, not bidirectional."""
    model = load_model(family_dirs["sdar"])
    ids = torch.randint(0, 250, (1, 12), generator=torch.Generator().manual_seed(2))
    other = ids.clone()
    other[0, 9] = (ids[0, 9] + 1) % 250
    pos = torch.arange(12)[None]
    vis = KeyVisibility(spans=_spans(12, 4))
    with torch.no_grad():
        a, b = model(ids, pos, vis), model(other, pos, vis)
    assert torch.equal(a[0, :8], b[0, :8])
    assert not torch.allclose(a[0, 8:], b[0, 8:])


def test_family_switches_are_parsed(family_dirs):
    """The config facts each family depends on: SDAR block 4 with its own head_dim; LLaDA2 half
    rotary, qk-norm, layer 0 dense, block 32; LLaDA-MoE bidirectional with every layer MoE."""
    sdar = load_model(family_dirs["sdar"]).config
    assert (sdar.attention, sdar.block_size, sdar.qk_norm, sdar.shift_logits) == ("block_causal", 4, True, False)
    assert sdar.head_dim == 2 * sdar.d_model // sdar.n_heads and sdar.rotary_dim == sdar.head_dim
    l2 = load_model(family_dirs["llada2_moe"]).config
    assert (l2.attention, l2.block_size, l2.qk_norm, l2.rotary_dim) == ("block_causal", 32, True, l2.head_dim // 2)
    assert l2.moe_layers == tuple(range(1, l2.n_layers)) and l2.moe.score == "sigmoid"
    lm = load_model(family_dirs["llada_moe"]).config
    assert (lm.family, lm.attention, lm.moe.score, lm.moe.norm_topk) == ("llada_moe", "bidirectional", "softmax", False)
    assert lm.moe_layers == tuple(range(lm.n_layers))
