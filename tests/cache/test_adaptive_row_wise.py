"""Under ``load(batch_invariant=True)`` the adaptive cache's attention-mass scores (which keys a
refresh recomputes) are computed row by row, so on a GPU their reductions run in a row's batch-1
order whatever the batch. On the CPU the option swaps no kernel, so the model is only marked
here: the row-by-row path must give the tokens of the batched one and be the path taken."""
from __future__ import annotations

import pytest
import torch

from dllm import GenerationConfig
from dllm.cache import adaptive, read_refresh
from dllm.engine.decoding import decode

PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13], [100, 3]]
ADAPTIVE = {"read": {"drift": 0.0, "cover": 0.5},
            "window": {"select": "window", "drift": 0.0, "scope": "all", "ratio": 0.5, "from_layer": 0}}


def test_row_wise_runs_each_row_alone():
    calls = []

    def fn(a, b, c):
        calls.append((a.shape[0], b is None, c.shape[0]))
        return a.sum(-1, keepdim=True) * c

    a, c = torch.randn(3, 5), torch.randn(3, 1)
    whole = read_refresh.row_wise(fn, False, a, None, c)
    rows = read_refresh.row_wise(fn, True, a, None, c)
    assert calls == [(3, True, 3), (1, True, 1), (1, True, 1), (1, True, 1)]
    assert torch.allclose(whole, rows)


@pytest.mark.parametrize("select", sorted(ADAPTIVE))
def test_batch_invariant_models_score_row_by_row_with_the_same_tokens(tiny_models, monkeypatch, select):
    model = tiny_models["llada"].model
    config = GenerationConfig(gen_length=16, block_length=8, steps=16, cache="adaptive", cache_args=ADAPTIVE[select],
                              stop_at_eos=False)
    batched = decode(model, PROMPTS, config)
    flags, original = [], read_refresh.row_wise

    def spy(fn, row_by_row, *tensors):
        flags.append(row_by_row)
        return original(fn, row_by_row, *tensors)

    monkeypatch.setattr(read_refresh, "row_wise", spy)
    monkeypatch.setattr(adaptive, "row_wise", spy)
    monkeypatch.setattr(model, "batch_invariant", True, raising=False)
    row_by_row = decode(model, PROMPTS, config)
    assert flags and all(flags)  # the scores were computed, each time row by row
    assert torch.equal(batched.answer, row_by_row.answer) and torch.equal(batched.nfe, row_by_row.nfe)
