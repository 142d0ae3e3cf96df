"""The adaptive cache's "prefix" scope recomputes the context before the block's end and keeps the
masked suffix's K/V (its cost counted position by position), and its memory peak counts the
candidate states' copy of the buffers, as the memory plan does."""
from __future__ import annotations

from dllm import GenerationConfig
from tests.cache.test_adaptive_bookkeeping import W, ceil_div, charged, models  # noqa: F401 (fixture)


def test_the_prefix_scope_stops_at_the_blocks_end(models):
    """Two layers, prompt 3, two blocks of W = 8 (L = 19), a drift refresh from layer 1 at every
    step after a block's start (a tiny threshold): block 1 recomputes [0, 11), block 2 [0, 19);
    layer 0 runs the window alone, so a step costs (W + scope) / 2 rounded up."""
    got = charged(models[2], 3, 16, select="window", drift=1e-6, from_layer=1, scope="prefix", ratio=1.0)
    assert W == 8
    assert got == 19 + 7 * ceil_div(8 + 11, 2) + 19 + 7 * ceil_div(8 + 19, 2)


def test_the_peak_counts_the_candidates_copy(tiny_models):
    """FreeDave's 4 drafts a row evaluate on a copy of their row's buffers (K/V, layer inputs,
    tokens seen): the peak is the buffers plus 4 copies, the plan's whole K/V share."""
    lm = tiny_models["llada"]
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12]]
    config = dict(gen_length=8, block_length=4, steps=8, cache="adaptive")
    alone = lm.generate_ids(prompts, GenerationConfig(**config)).memory
    drafts = lm.generate_ids(prompts, GenerationConfig(**config, strategy="freedave",
                                                       strategy_args={"num_drafts": 4})).memory
    assert alone["kv_cache_peak_bytes"] == alone["kv_cache_bytes"]
    assert drafts["kv_cache_peak_bytes"] == 5 * alone["kv_cache_peak_bytes"] == drafts["kv_cache_bytes"]
