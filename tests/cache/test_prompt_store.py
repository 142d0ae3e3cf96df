"""Prompt K/V shared across decodes of block-causal models (dllm/cache/prompt_store.py): reused
answers equal uncached ones token for token, at batch > 1 with ragged prompts, for blocks counted
from position 0 (the tiny Fast-dLLM v2 and SDAR) and from the answer start (dllm's own
block-diffusion layout); blocks are reused only where the partitions agree; eviction keeps the
byte bound (the serving scheduler's use: tests/serve/test_prompt_cache_serving.py)."""
from __future__ import annotations

import random

import pytest

from dllm import GenerationConfig
from dllm.cache.prompt_store import PromptKVStore, attach
from dllm.engine.decoding import Decoding, RowStart, decode
from tests.block_causal_tiny import KINDS, PREAMBLE, TAILS, tiny_block_causal


def prompts(tails) -> list[list[int]]:
    return [PREAMBLE + t for t in tails]


@pytest.fixture(scope="module", params=KINDS)
def model(request, tmp_path_factory):
    return tiny_block_causal(tmp_path_factory.mktemp(request.param), request.param)


def config(cache: str = "dual", **options) -> GenerationConfig:
    return GenerationConfig(gen_length=8, block_length=4, steps=8, cache=cache, stop_at_eos=False, **options)


def run(model, batch: list[list[int]], cfg: GenerationConfig, store: PromptKVStore | None = None,
        seeds: list[int] | None = None) -> list[list[int]]:
    seeds = seeds or list(range(len(batch)))
    decoding = Decoding(model, [RowStart(prefix=p, gen_length=cfg.gen_length, seed=s) for p, s in zip(batch, seeds)],
                        cfg)
    assert attach(decoding.state, store) == (store is not None)
    return decoding.run().answer.tolist()


@pytest.mark.parametrize("cache", ["prefix", "dual"])
def test_reused_answers_equal_uncached_ones(model, cache):
    """Batches of ragged prompts sharing a preamble: the first fills the store, the next (other
    tails, another order, then the same batch again) reuse it; every answer equals the decode
    without a store, and prompt tokens really came from the store."""
    store = PromptKVStore(64 << 20)
    cfg = config(cache, policy="threshold", policy_args={"tau": 0.3})
    batches = [prompts(TAILS[:3]), prompts(TAILS[2:][::-1]), prompts(TAILS[:3]), [PREAMBLE[:13], PREAMBLE + [9]]]
    for batch in batches:
        assert run(model, batch, cfg, store) == run(model, batch, cfg)
    assert store.stats.hit_rows > 0 and store.stats.tokens_reused >= len(PREAMBLE)
    assert 0 < store.bytes <= store.max_bytes


def test_a_batch_seen_before_reuses_every_prompt_block_it_can(model):
    store = PromptKVStore(64 << 20)
    batch = prompts(TAILS[:4])
    first = run(model, batch, config(), store)
    before = store.stats.tokens_reused
    assert run(model, batch, config(), store) == first
    unit = model.config.block_size
    # absolute blocks: engine prompts are whole units of lcm(block_length, bd_size) = 4 here, and
    # the longest row is computed from the first column some row misses; answer-origin: every block
    lengths = [len(p) - (len(p) % unit if model.config.block_origin == "absolute" else 0) for p in batch]
    assert store.stats.tokens_reused - before == sum(lengths)


def test_blocks_are_reused_only_where_the_partitions_agree(model):
    """With answer-origin blocks a prompt one token longer shifts every boundary: nothing of the
    shared preamble can be reused (its K/V saw other blocks); from position 0 the preamble's whole
    blocks are shared."""
    store = PromptKVStore(64 << 20)
    run(model, [PREAMBLE + [1, 2, 3, 4]], config(), store)
    hits = store.stats.hit_blocks
    single = [PREAMBLE + [1, 2, 3, 4, 5]]
    assert run(model, single, config(), store) == run(model, single, config())
    found = store.stats.hit_blocks - hits
    if model.config.block_origin == "answer":
        assert found == 0
    else:
        assert found == len(PREAMBLE + [1, 2, 3, 4]) // model.config.block_size


def test_eviction_keeps_the_byte_bound_and_answers_exact(model):
    """A store of a few blocks, many distinct prompts: least recently used blocks go, the bound
    always holds, and answers stay exact whatever was evicted."""
    probe = PromptKVStore(64 << 20)
    run(model, [PREAMBLE[:8]], config(), probe)
    block_bytes = probe.bytes // probe.stats.inserted_blocks
    store = PromptKVStore(5 * block_bytes)
    rng = random.Random(0)
    for i in range(6):
        batch = [PREAMBLE[: rng.randrange(4, 21)] + [rng.randrange(3, 90) for _ in range(rng.randrange(0, 6))]
                 for _ in range(2)]
        assert run(model, batch, config(), store, seeds=[i, i + 1]) == run(model, batch, config(), seeds=[i, i + 1])
        assert store.bytes <= store.max_bytes
    assert store.stats.evicted_blocks > 0 and store.stats.hit_blocks > 0


def test_lru_keeps_a_prefix_longer_than_its_extensions():
    import torch

    store = PromptKVStore(3 * 16)
    block = lambda: torch.zeros(4, dtype=torch.float32)  # noqa: E731  (16 bytes)
    chain = store.chain(b"root", list(range(12)), [4, 8, 12])
    store.insert(chain, [block(), block(), block()])
    other = store.chain(b"root", [0, 1, 2, 3, 9, 9, 9, 9], [4, 8])
    store.insert(other, [block(), block()])  # shares the first block; evicts the deepest one
    assert store.bytes == 3 * 16 and len(store.match(chain)) == 2 and len(store.match(other)) == 2
    assert PromptKVStore(0).max_bytes == 0 and not attach(None, None)
