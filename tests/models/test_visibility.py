"""Key visibility without a dense mask: the compact form gives the attention of the dense
(T, S) mask it replaces, for key padding, the block-causal rule and grouped K/V heads."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dllm.models.layers import attend
from dllm.models.visibility import KeyVisibility, block_causal_spans


def dense_block_causal_mask(valid, q_start, q_len, key_len, prompt_width, block_size):
    """The rule written out as a (B, 1, T, S) mask: keys in the query's block or earlier."""
    q_block = (torch.arange(q_start, q_start + q_len) - prompt_width).div(block_size, rounding_mode="floor")
    k_block = (torch.arange(key_len) - prompt_width).div(block_size, rounding_mode="floor")
    return valid[:, None, None, :key_len] & (k_block[None, :] <= q_block[:, None])[None, None]


def dense_attention(q, k, v, mask):
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2)


def _qkv(B, H, H_kv, T, S, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, T, D, generator=g), torch.randn(B, H_kv, S, D, generator=g),
            torch.randn(B, H_kv, S, D, generator=g))


def _valid(B, S, pads):
    valid = torch.ones(B, S, dtype=torch.bool)
    for row, pad in enumerate(pads):
        valid[row, :pad] = False
    return valid


@pytest.mark.parametrize("H_kv", [4, 2, 1])
@pytest.mark.parametrize("pads", [(0, 0), (0, 3)])
def test_key_padding_equals_dense_mask(H_kv, pads):
    q, k, v = _qkv(2, 4, H_kv, 7, 19)
    valid = _valid(2, 19, pads)
    expected = dense_attention(q, k, v, valid[:, None, None, :].expand(-1, 1, 7, 19))
    compact = KeyVisibility(valid=valid if any(pads) else None)
    torch.testing.assert_close(attend(q, k, v, compact), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("q_start,q_len,key_len", [(0, 29, 29), (9, 12, 29), (13, 3, 29), (0, 21, 21)])
def test_block_causal_spans_equal_dense_mask(q_start, q_len, key_len):
    """Uncached (queries = keys), a cached window inside a longer buffer, and a window that
    does not start on a block boundary; prompt width 5 (blocks counted back into the prompt)."""
    P, size = 5, 4
    q, k, v = _qkv(2, 4, 2, q_len, key_len, seed=q_start)
    valid = _valid(2, key_len, (0, 2))
    spans = block_causal_spans(q_start, q_len, key_len, prompt_width=P, block_size=size)
    expected = dense_attention(q, k, v, dense_block_causal_mask(valid, q_start, q_len, key_len, P, size))
    got = attend(q, k, v, KeyVisibility(valid=valid, spans=spans))
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)


def test_spans_cover_the_queries_once_and_stop_at_block_ends():
    spans = block_causal_spans(3, 14, 40, prompt_width=5, block_size=4)
    assert [lo for lo, _, _ in spans] == [0] + [hi for _, hi, _ in spans[:-1]] and spans[-1][1] == 14
    for lo, hi, key_end in spans:  # canvas queries [3 + lo, 3 + hi) share one block
        block_end = 5 + ((3 + lo - 5) // 4 + 1) * 4
        assert key_end == block_end and 3 + hi <= block_end


def test_runner_builds_no_mask_without_padding(tiny_models):
    """Equal-length prompts: no key mask at all (fused SDPA backends stay reachable)."""
    from dllm.runner.canvas import build_canvas
    from dllm.runner.model_runner import ModelRunner

    model = tiny_models["llada"].model
    canvas = build_canvas([[5, 6, 7], [8, 9, 10]], gen_length=4, mask_id=model.mask_token_id,
                          pad_id=model.config.pad_token_id, device="cpu")
    assert ModelRunner(model, canvas).visibility(0, 7, 7) == KeyVisibility()
    ragged = build_canvas([[5, 6, 7], [8]], gen_length=4, mask_id=model.mask_token_id,
                          pad_id=model.config.pad_token_id, device="cpu")
    seen = ModelRunner(model, ragged).visibility(0, 7, 7)
    assert seen.spans is None and seen.valid.shape == (2, 7)


@pytest.mark.parametrize("form", ["spans", "allowed"])
def test_a_query_that_sees_no_key_gets_zeros_and_the_others_stay_exact(form):
    """A block-causal canvas left-padded past a block (a ragged row, a captured canvas length)
    has blocks of padding only: their queries see no valid key. SDPA (torch >= 2.5) gives them
    zeros, so their K/V stays finite and the real queries, which never see them, are exact."""
    B, H, H_kv, T, S = 1, 4, 2, 12, 12
    q, k, v = _qkv(B, H, H_kv, T, S)
    valid = torch.ones(B, S, dtype=torch.bool)
    valid[:, :8] = False  # 8 pads, then a prompt of 4 in blocks of 4: two blocks are padding only
    spans = block_causal_spans(0, T, S, prompt_width=12, block_size=4)
    if form == "spans":
        visible = KeyVisibility(valid=valid, spans=spans)
    else:  # the graphs' form: each query's key end as a dense rule
        ends = torch.tensor([end for lo, hi, end in spans for _ in range(lo, hi)])
        visible = KeyVisibility(valid=valid, allowed=torch.arange(S)[None, :] < ends[:, None])
    out = attend(q, k, v, visible)
    assert torch.isfinite(out).all()
    assert out[:, :8].abs().max() == 0  # the pad-only blocks' queries
    mask = dense_block_causal_mask(valid, 0, T, S, 12, 4)
    torch.testing.assert_close(out[:, 8:], dense_attention(q, k, v, mask)[:, 8:], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("form", ["valid", "spans", "allowed"])
def test_grouped_heads_repeated_under_a_mask_give_the_broadcast_attention(monkeypatch, form):
    """On CUDA a masked call repeats grouped K/V heads (the memory-efficient kernel takes masks,
    not enable_gqa); the result is the broadcast call's. Forced here on the CPU."""
    import dllm.models.layers as layers

    B, H, H_kv, T, S = 2, 6, 2, 5, 9
    q, k, v = _qkv(B, H, H_kv, T, S)
    valid = torch.ones(B, S, dtype=torch.bool)
    valid[1, :3] = False
    visible = {"valid": KeyVisibility(valid=valid),
               "spans": KeyVisibility(valid=valid, spans=((0, 2, 6), (2, 5, 9))),
               "allowed": KeyVisibility(valid=valid, allowed=torch.rand(T, S, generator=torch.Generator().manual_seed(1))
                                        > 0.3)}[form]
    broadcast = attend(q, k, v, visible)
    calls = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(layers, "expand_heads_under_masks", lambda device: True)
    monkeypatch.setattr(layers.F, "scaled_dot_product_attention",
                        lambda *a, **kw: calls.append((a[1].shape[1], kw.get("enable_gqa"))) or real(*a, **kw))
    repeated = attend(q, k, v, visible)
    assert calls and all(heads == H and not gqa for heads, gqa in calls)
    torch.testing.assert_close(repeated, broadcast, rtol=1e-6, atol=1e-6)
