"""Memory plan: the planned KV bytes are what the caches allocate, and a budget is enforced
before any model work."""
from __future__ import annotations

import pytest

from dllm.engine.config import GenerationConfig
from dllm.engine.memory import MemoryBudgetError, kv_cache_bytes, model_bytes

PROMPTS = [[5, 6, 7, 8, 9], [10, 11, 12]]


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_dual_cache_allocates_exactly_the_planned_kv_bytes(tiny_models, family):
    lm = tiny_models[family]
    out = lm.generate_ids(PROMPTS, GenerationConfig(gen_length=8, block_length=4, steps=8, cache="dual"))
    canvas = max(map(len, PROMPTS)) + 8
    cfg = lm.model.config
    expected = 2 * cfg.n_layers * len(PROMPTS) * cfg.n_kv_heads * canvas * cfg.head_dim * 4  # float32
    assert out.memory["kv_cache_bytes"] == expected == kv_cache_bytes(lm.model, len(PROMPTS), canvas)
    assert out.memory["kv_cache_peak_bytes"] == expected
    assert out.memory["model_bytes"] == model_bytes(lm.model) > 0


def test_no_cache_holds_no_kv_and_candidates_stay_within_plan(tiny_models):
    lm = tiny_models["llada"]
    out = lm.generate_ids(PROMPTS, GenerationConfig(gen_length=8, steps=8))
    assert out.memory["kv_cache_bytes"] == out.memory["kv_cache_peak_bytes"] == 0
    config = GenerationConfig(gen_length=8, block_length=4, steps=8, cache="dual", strategy="freedave",
                              strategy_args={"num_drafts": 4})
    out = lm.generate_ids(PROMPTS, config)
    base = kv_cache_bytes(lm.model, len(PROMPTS), max(map(len, PROMPTS)) + 8)
    assert base < out.memory["kv_cache_peak_bytes"] <= out.memory["kv_cache_bytes"]


def test_budget_refuses_before_any_forward(tiny_models, monkeypatch):
    lm = tiny_models["llada"]
    calls = []
    monkeypatch.setattr(lm.model, "forward", lambda *a, **k: calls.append(1))
    with pytest.raises(MemoryBudgetError, match="raise memory_budget_mb"):
        lm.generate_ids(PROMPTS, GenerationConfig(gen_length=8, cache="dual", memory_budget_mb=0.001))
    assert calls == []


def test_budget_that_fits_decodes_normally(tiny_models):
    lm = tiny_models["llada"]
    plain = lm.generate_ids(PROMPTS, GenerationConfig(gen_length=8, steps=8, cache="dual", block_length=4))
    budget = plain.memory["total_bytes"] / (1 << 20)
    fitted = lm.generate_ids(PROMPTS, GenerationConfig(gen_length=8, steps=8, cache="dual", block_length=4,
                                                       memory_budget_mb=budget))
    assert fitted.token_ids == plain.token_ids
    with pytest.raises(MemoryBudgetError, match="2 rows x 13 positions"):
        lm.generate_ids(PROMPTS, GenerationConfig(gen_length=8, steps=8, cache="dual", block_length=4,
                                                  memory_budget_mb=budget * 0.99))


def test_budget_must_be_positive():
    with pytest.raises(ValueError, match="memory_budget_mb must be positive"):
        GenerationConfig(gen_length=8, memory_budget_mb=0)


@pytest.mark.parametrize("strategy", [{}, {"strategy": "freedave", "strategy_args": {"num_drafts": 4}},
                                      {"strategy": "ssd", "strategy_args": {"num_drafts": 4}}],
                         ids=["plain", "freedave", "ssd"])
def test_adaptive_cache_stays_within_its_plan(tiny_models, strategy):
    """The adaptive cache holds every layer's input next to the K/V; the plan counts them."""
    lm = tiny_models["llada"]
    config = GenerationConfig(gen_length=8, block_length=4, steps=8, cache="adaptive", **strategy)
    out = lm.generate_ids(PROMPTS, config)
    assert kv_cache_bytes(lm.model, len(PROMPTS), max(map(len, PROMPTS)) + 8) < out.memory["kv_cache_peak_bytes"]
    assert out.memory["kv_cache_peak_bytes"] <= out.memory["kv_cache_bytes"]
    if not strategy:
        assert out.memory["kv_cache_peak_bytes"] == out.memory["kv_cache_bytes"]
