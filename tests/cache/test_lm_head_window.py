"""The LM head (and the last block's output projection and MLP) run only on the queries whose
logits are used (the decision window, or every answer output for answer-wide stoppers; on a
CPU, for rules that read masked positions only, the window's masked positions): tokens, order
and NFE equal the full-head decode for every family, cache mode and strategy, on a ragged
batch."""
from __future__ import annotations

import pytest
import torch

import dllm
from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.models.tiny import write_tiny_checkpoint
from dllm.models.transformer import DiffusionTransformer

PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13]]
CACHES = [dict(cache="none"), dict(cache="prefix"), dict(cache="dual"), dict(cache="dual", sub_block_length=4)]
STRATEGIES = {
    "plain": dict(policy="threshold", policy_args={"tau": 0.09}),
    "freedave": dict(strategy="freedave", strategy_args={"num_drafts": 3}),
    "ssd": dict(strategy="ssd", strategy_args={"num_drafts": 4}),
    "lopa": dict(strategy="lopa", policy="threshold", policy_args={"tau": 0.09}),
    "sched": dict(stopper="sched", stopper_args={"tau_high": 3.0, "tau_low": 0.5}),
    # exits at once: every answer position is filled from the first forward's logits
    "sched_exit": dict(stopper="sched", stopper_args={"tau_high": -1.0, "tau_low": -1.0}),
    "cfg": dict(cfg_scale=1.0),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("head")
    return {family: dllm.load(write_tiny_checkpoint(root / family, family, seed=5), dtype="float32").model
            for family in ("llada", "dream", "fast_dllm_v2")}


@pytest.fixture
def full_head(monkeypatch):
    """The LM head on every query, the window sliced afterwards (the behaviour before)."""
    forward = DiffusionTransformer.forward

    def full(self, input_ids, position_ids, visible=None, cache=None, cache_write=0, logits_for=None,
             head_rows=None):
        logits = forward(self, input_ids, position_ids, visible, cache, cache_write)
        return logits if logits_for is None else logits[:, logits_for[0] : logits_for[1]]

    return lambda: monkeypatch.setattr(DiffusionTransformer, "forward", full)


@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("cache", CACHES, ids=lambda c: "+".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("family", ["llada", "dream", "fast_dllm_v2"])
def test_window_head_equals_full_head(models, full_head, family, cache, strategy):
    if strategy == "cfg" and cache["cache"] != "none":
        pytest.skip("classifier-free guidance runs without a cache")
    config = GenerationConfig(gen_length=16, block_length=8, steps=8, **cache, **STRATEGIES[strategy])
    seen = []
    head = models[family].lm_head.forward
    models[family].lm_head.forward = lambda x: seen.append(x.shape[:-1]) or head(x)
    try:
        window = decode(models[family], PROMPTS, config)
    finally:
        del models[family].lm_head.forward
    full_head()
    full = decode(models[family], PROMPTS, config)
    assert torch.equal(window.answer, full.answer)
    assert torch.equal(window.order, full.order)
    assert torch.equal(window.nfe, full.nfe) and torch.equal(window.token_forwards, full.token_forwards)
    if not strategy.startswith("sched"):  # answer-wide stoppers read every answer output of a canvas forward
        assert max((s[1] for s in seen if len(s) == 2), default=0) <= config.window_length
    # plain steps of rules that read masked positions only: the head skips committed positions
    selected = [s[0] for s in seen if len(s) == 1]
    if strategy == "plain":
        assert selected and min(selected) < len(PROMPTS) * config.window_length
    else:
        assert not selected


@pytest.mark.parametrize("family", ["llada", "dream", "fast_dllm_v2"])
def test_last_block_runs_only_the_read_queries(models, family):
    """logits_for / head_rows: the read queries' logits equal the full forward's, and the last
    block's MLP (and the head) see only those queries while every earlier block sees all."""
    model = models[family]
    torch.manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (2, 12), device=model.device)
    positions = torch.arange(12, device=model.device).expand(2, 12)
    head_rows = torch.tensor([[True, False, True, True, False, False],
                              [False, False, False, True, True, True]], device=model.device)
    seen = {}

    def record(i):
        def hook(module, args, out):
            seen[i] = args[0].shape[:-1]
        return hook

    hooks = [block.mlp.register_forward_hook(record(i)) for i, block in enumerate(model.layers)]
    try:
        with torch.no_grad():
            full = model(ids, positions)
            window = model(ids, positions, logits_for=(4, 10))
            seen.clear()
            picked = model(ids, positions, logits_for=(4, 10), head_rows=head_rows)
    finally:
        for hook in hooks:
            hook.remove()
    torch.testing.assert_close(window, full[:, 4:10], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(picked[head_rows], full[:, 4:10][head_rows], rtol=1e-5, atol=1e-5)
    assert not picked[~head_rows].any()
    last = len(model.layers) - 1
    assert seen[last] == (int(head_rows.sum()),)
    assert all(seen[i] == (2, 12) for i in range(last))
