"""The adaptive cache's bookkeeping, against counts worked out by hand (dllm/cache/adaptive.py):
the drift test's statistic, the token choice's size, the selection test's cost, and what a decode
is charged: which forwards refresh (block start, periodic every N steps of a block, drift), over
which scope, rounded up per forward. One batch-1 row, one token a step (steps = gen_length), so
every forward's query set is known; a refresh from layer a of n costs (n - a) / n of a token."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import dllm
from dllm import GenerationConfig
from dllm.cache.adaptive import AdaptiveCache
from dllm.engine.decoding import decode
from dllm.models.tiny import write_tiny_checkpoint

W = 8  # block_length: the window of every forward (LLaDA: no logit shift)


def test_drift_is_the_largest_change_over_unchanged_positions():
    """Relative changes 0.1 and 0.5 at two still-masked positions and 3.0 at one just committed:
    the row's drift is 0.5 (the largest; a mean would say 0.3), the committed one is left out."""
    cached = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [1.0, 0.0]]])  # (B=1, W=3, d=2)
    fresh = torch.tensor([[[1.1, 0.0], [0.0, 3.0], [4.0, 0.0]]])
    unchanged = torch.tensor([[True, True, False]])
    assert AdaptiveCache._drift(fresh, cached, unchanged).tolist() == pytest.approx([0.5])
    assert AdaptiveCache._drift(fresh, cached, torch.zeros_like(unchanged)).tolist() == [0.0]


def test_top_takes_the_ceiling_of_ratio_times_candidates():
    """ratio 0.5 of 5 candidates is 2.5 tokens: 3 are recomputed (the best-scoring ones, never a
    non-candidate however high its score); 0.1 of 5 still takes one."""
    score = torch.tensor([[9.0, 5.0, 1.0, 4.0, 3.0, 2.0]])
    candidates = torch.tensor([[False, True, True, True, True, True]])
    assert AdaptiveCache._top(score, candidates, 0.5).tolist() == [[False, True, False, True, True, False]]
    assert AdaptiveCache._top(score, candidates, 0.1).tolist() == [[False, True, False, False, False, False]]


def test_selection_cost_rounds_up():
    """d=4, 2 heads of 2 (1 K/V head), MLP 8, 2 layers, 10 keys: a layer is 4 * (8 + 4) + 3 * 4 * 8
    + 2 * 10 * 4 = 224 multiply-adds a token, the test 4 * 4 + 10 * 4 = 56; 3 candidates cost
    3 * 2 * 56 / 224 = 1.5 layer-tokens x n_layers, charged as 2."""
    config = SimpleNamespace(n_heads=2, head_dim=2, n_kv_heads=1, d_model=4, mlp_hidden_size=8, n_layers=2)
    cost = AdaptiveCache._test_cost(SimpleNamespace(config=config), torch.tensor([[True] * 3 + [False]]), 10)
    assert cost.tolist() == [2]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("adaptive_bookkeeping")
    two = write_tiny_checkpoint(root / "two", "llada", seed=11)
    three = write_tiny_checkpoint(root / "three", "llada", seed=12, n_layers=3)
    return {n: dllm.load(path, device="cpu", dtype="float32").model for n, path in ((2, two), (3, three))}


def charged(model, prompt_len: int, gen: int, **cache_args) -> int:
    config = GenerationConfig(gen_length=gen, block_length=W, steps=gen, stop_at_eos=False, cache="adaptive",
                              cache_args=cache_args)
    out = decode(model, [list(range(5, 5 + prompt_len))], config)
    assert out.nfe.tolist() == [gen]  # one token a step: every forward below is counted
    return int(out.token_forwards[0])


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# Two layers, prompt 3: the canvas L = 3 + gen. A block-start refresh costs L, a window forward W.
CASES = {
    # drift refresh from layer 1 of 2 over the whole canvas at steps 1..7: layer 0 the window (8),
    # layer 1 all 11 tokens: (8 + 11) / 2 = 9.5 -> 10 (a tiny drift threshold: the window's
    # still-masked inputs move at every step, as a token beside them was committed)
    "drift-all": (dict(select="window", drift=1e-6, from_layer=1, scope="all", ratio=1.0), 8,
                  11 + 7 * ceil_div(8 + 11, 2)),
    # drift 0 from layer 0: the embedding's drift is exactly 0, and 0 reaches 0: every step
    # recomputes all 11 tokens, the uncached decode's cost
    "drift-zero": (dict(select="window", drift=0.0, from_layer=0, scope="all", ratio=1.0), 8, 8 * 11),
    # the same over the response only (16 answer tokens, the window inside): (8 + 16) / 2 = 12
    "drift-response": (dict(select="window", drift=1e-6, from_layer=1, scope="response", ratio=1.0), 16,
                       2 * (19 + 7 * 12)),
    # over the prompt only: the query set is the prompt and the window, 3 + 8 in both blocks
    "drift-prompt": (dict(select="window", drift=1e-6, from_layer=1, scope="prompt", ratio=1.0), 16,
                     2 * (19 + 7 * ceil_div(8 + 11, 2))),
    # periodic full refresh at steps 0, 2, 4, 6 of the block, window forwards at 1, 3, 5, 7
    "prompt-every-window": (dict(select="window", drift=float("inf"), prompt_every=2), 8, 4 * 11 + 4 * W),
    "prompt-every-read": (dict(select="read", drift=float("inf"), prompt_every=2), 8, 4 * 11 + 4 * W),
    # per block of 16 answer tokens: full refresh at 0, the answer (16 tokens) at 2, 4, 6
    "response-every-window": (dict(select="window", drift=float("inf"), response_every=2), 16,
                              2 * (19 + 3 * 16 + 4 * W)),
    "response-every-read": (dict(select="read", drift=float("inf"), response_every=2), 16,
                            2 * (19 + 3 * 16 + 4 * W)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_token_forwards_follow_the_refresh_schedule(models, name):
    args, gen, want = CASES[name]
    assert charged(models[2], 3, gen, **args) == want


def test_three_layer_refresh_is_charged_rounded_up(models):
    """3 layers, prompt 5, answer 8 (L = 13), drift refresh from layer 1 over the canvas: layer 0
    the window (8), layers 1 and 2 all 13 tokens: (8 + 2 * 13) / 3 = 11.33 -> 12 a step."""
    got = charged(models[3], 5, 8, select="window", drift=1e-6, from_layer=1, scope="all", ratio=1.0)
    assert got == 13 + 7 * ceil_div(8 + 2 * 13, 3)


def test_read_refresh_is_charged_rounded_up(models):
    """select="read" on 3 layers, from layer 1, cover and most 1: the window's still-masked inputs
    at layer 1 moved from the block start's (a tiny threshold), so every step after the block start
    refreshes all L - W = 4 reused tokens (prompt 4, answer 8: L = 12) for layers 1..2 (2 of 3):
    (3 * 8 + 2 * 4) / 3 = 10.67 -> 11 a step, after the block start's 12."""
    got = charged(models[3], 4, 8, select="read", drift=1e-6, from_layer=1, cover=1.0, most=1.0)
    assert got == 12 + 7 * ceil_div(3 * 8 + 2 * 4, 3)

