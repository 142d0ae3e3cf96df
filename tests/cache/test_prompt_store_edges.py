"""The prompt K/V store's bookkeeping at its edges, on stand-in models and blocks: each model
block of a prompt is its own stored block (the first, shorter one of answer-origin blocks too), a
block of exactly the byte bound is kept, a lookup leaves a chain's first block the most recently
used, a store of 0 bytes is off, a D2F model (its prompt one block) never uses the store, and
every prompt token is counted once, reused or computed."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from dllm import GenerationConfig
from dllm.cache.block import BlockCache
from dllm.cache.prompt_store import PromptKVStore, PromptReuse, attach, block_cache_of
from dllm.engine.decoding import Decoding, RowStart
from tests.block_causal_tiny import tiny_block_causal


def stand_in(origin: str = "absolute"):
    config = SimpleNamespace(block_size=4, block_origin=origin)
    return SimpleNamespace(attention="block_causal", config=config, dtype=torch.float32, device="cpu")


def block() -> torch.Tensor:
    return torch.zeros(4, dtype=torch.float32)  # 16 bytes


def test_every_model_block_ends_a_stored_block():
    reuse = PromptReuse(PromptKVStore(1 << 20), stand_in("answer"))
    assert reuse.ends(10) == [2, 6, 10]  # counted back from the answer start: a first block of 2
    assert reuse.ends(8) == [4, 8]
    assert reuse.ends(3) == [3]


def test_a_block_of_exactly_the_bound_is_kept():
    store = PromptKVStore(16)
    store.insert(store.chain(b"r", [1, 2, 3, 4], [4]), [block()])
    assert len(store) == 1 and store.bytes == 16
    store.insert(store.chain(b"r", [5, 6, 7, 8], [4]), [torch.zeros(5)])  # 20 bytes: never fits
    assert len(store) == 1 and store.stats.inserted_blocks == 1


def test_a_lookup_leaves_the_first_block_most_recent():
    store = PromptKVStore(4 * 16)
    chain = store.chain(b"r", list(range(12)), [4, 8, 12])
    store.insert(chain, [block(), block(), block()])
    other = store.chain(b"r", [9] * 4, [4])
    store.insert(other, [block()])  # the store is full: the chain's three and this one
    assert len(store.match(chain)) == 3  # now the chain's first block is the most recent
    store.insert(store.chain(b"r", [7] * 8, [4, 8]), [block(), block()])  # two out: the oldest two
    assert len(store.match(other)) == 0
    assert len(store.match(chain)) == 2  # its deepest block went, its first two stay


def test_a_zero_byte_store_and_a_d2f_model_are_off():
    state = SimpleNamespace(model=stand_in(), cache=BlockCache("dual", block_length=4))
    assert block_cache_of(state.model, state.cache) is state.cache
    assert not attach(state, PromptKVStore(0)) and state.cache.prompt_reuse is None
    assert attach(state, PromptKVStore(1 << 20)) and state.cache.prompt_reuse is not None
    assert block_cache_of(stand_in("prompt"), BlockCache("dual", block_length=4)) is None


def test_attaching_after_the_first_forward_is_refused():
    state = SimpleNamespace(model=stand_in(), cache=BlockCache("dual", block_length=4))
    state.cache.kv = object()  # the buffers of a first forward
    with pytest.raises(RuntimeError, match="before the first forward"):
        attach(state, PromptKVStore(1 << 20))


def test_prompt_tokens_are_reused_or_computed(tmp_path):
    """A batch seen before: every prompt token counts once, reused or computed."""
    model = tiny_block_causal(tmp_path / "v2", "fast_dllm_v2")
    store = PromptKVStore(64 << 20)
    prompts = [list(range(5, 17)), list(range(5, 13))]  # 12 and 8 tokens: whole blocks, no lead
    for _ in range(2):
        decoding = Decoding(model, [RowStart(prefix=p, gen_length=4, seed=0) for p in prompts],
                            GenerationConfig(gen_length=4, block_length=4, cache="dual"))
        assert attach(decoding.state, store)
        decoding.run()
    stats = store.stats
    assert stats.lookups == 4
    assert (stats.tokens_computed, stats.tokens_reused) == (12 + 8, 12 + 8)  # the first run's, the second's
