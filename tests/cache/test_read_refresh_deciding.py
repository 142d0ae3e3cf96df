"""select="read" scores the reused keys by the attention of the queries whose logits decide a
mask: with shifted logits (Dream) query j decides position j + 1, so a query counts where the
position after it is masked, not where its own is."""
from __future__ import annotations

import torch

import dllm.cache.adaptive as adaptive
import dllm.cache.read_refresh as read_refresh
from dllm import GenerationConfig
from dllm.engine.decoding import decode


def test_deciding_queries_are_those_before_a_mask(tiny_models, monkeypatch):
    model = tiny_models["dream"].model
    assert model.shift_logits
    seen = []
    forward, mass = read_refresh.read_forward, read_refresh._read_mass

    def recording_forward(runner, tokens, kv, hidden, rows, q_lo, be, *args, **kwargs):
        seen.append([tokens[:, q_lo:be].clone(), None])
        return forward(runner, tokens, kv, hidden, rows, q_lo, be, *args, **kwargs)

    def recording_mass(attn, q, k_buf, visible, deciding, row_by_row=False):
        seen[-1][1] = deciding.clone()
        return mass(attn, q, k_buf, visible, deciding, row_by_row)

    monkeypatch.setattr(adaptive, "read_forward", recording_forward)
    monkeypatch.setattr(read_refresh, "_read_mass", recording_mass)
    decode(model, [[5, 6, 7, 8, 9], [10, 11, 12]], GenerationConfig(gen_length=8, block_length=4, steps=8,
                                                                    cache="adaptive", stop_at_eos=False))
    checked = [(window, deciding) for window, deciding in seen if deciding is not None]
    assert len(checked) >= 4  # the window forwards after each block start (drift 0: every row refreshes)
    for window, deciding in checked:  # window [bs - 1, be): query j decides position j + 1
        masked = window[:, 1:] == model.mask_token_id
        assert torch.equal(deciding[:, :-1], masked) and not deciding[:, -1].any()
