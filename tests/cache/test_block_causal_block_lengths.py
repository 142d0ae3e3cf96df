"""Block-causal caches are exact for every block_length, whatever its ratio to the model's bd_size."""
from __future__ import annotations

import pytest

import dllm
from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.models.tiny import write_tiny_checkpoint

BD = 8  # the model's bd_size
PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13], [100, 3], [55, 66, 77, 88, 99]]


@pytest.fixture(scope="module")
def block_causal(tmp_path_factory):
    path = write_tiny_checkpoint(tmp_path_factory.mktemp("bd"), "fast_dllm_v2", seed=5, block_size=BD)
    return dllm.load(path).model


def _decode(model, prompts, block_length, **options):
    gen_length = 3 * block_length if block_length % BD and BD % block_length else 2 * max(block_length, BD)
    cfg = GenerationConfig(gen_length=gen_length, block_length=block_length, steps=gen_length,
                           stop_at_eos=False, **options)
    return decode(model, prompts, cfg)


@pytest.mark.parametrize("block_length", [BD // 2, BD, 2 * BD, BD + BD // 2],
                         ids=["half", "equal", "double", "one_and_half"])
@pytest.mark.parametrize("cache", ["prefix", "dual"])
@pytest.mark.parametrize("policy", ["low_confidence", "threshold"])
def test_cached_equals_uncached_for_every_block_length(block_causal, block_length, cache, policy):
    plain = _decode(block_causal, PROMPTS, block_length, policy=policy)
    cached = _decode(block_causal, PROMPTS, block_length, policy=policy, cache=cache)
    assert cached.answer.tolist() == plain.answer.tolist()
    assert cached.nfe.tolist() == plain.nfe.tolist()


@pytest.mark.parametrize("block_length", [BD // 2, 2 * BD])
def test_small_and_large_blocks_batch_equals_single_runs(block_causal, block_length):
    batch = _decode(block_causal, PROMPTS, block_length, cache="dual")
    for row, prompt in enumerate(PROMPTS):
        single = _decode(block_causal, [prompt], block_length, cache="dual")
        assert batch.answer[row].tolist() == single.answer[0].tolist()
