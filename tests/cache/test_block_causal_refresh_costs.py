"""What each cached forward of a block-causal model covers, in token-forwards: a block's refresh
forwards the just-finished model block (its final K/V) and the active one, never again the K/V
already exact before them; later steps forward the active block alone (from one position early
where logits are shifted), in the prefix cache as in the dual one, since no later block reaches
it. The expected counts are summed here from those spans, so a refresh from position 0, or a
prefix window that runs on to the canvas end, changes them."""
from __future__ import annotations

import pytest

from dllm import GenerationConfig
from dllm.engine.decoding import decode
from tests.block_causal_tiny import tiny_block_causal

PROMPTS = [[9, 10, 11, 12, 13, 14, 15, 16], [5, 6, 7, 8]]  # whole blocks of 4: the canvas prompt is 8 wide
GEN, BLOCK, STEPS = 12, 4, 6


def _expected(prompt_width: int, shift: int) -> int:
    """One row's token-forwards: each block's refresh, then its other steps' windows."""
    per_block = STEPS // (GEN // BLOCK)
    total = 0
    for start in range(prompt_width, prompt_width + GEN, BLOCK):
        first = start == prompt_width
        total += (start + BLOCK) - (0 if first else start - BLOCK)  # refresh: the finished block and this one
        total += (per_block - 1) * (BLOCK + shift)  # the block alone, shifted one early
    return total


@pytest.mark.parametrize("cache", ["prefix", "dual"])
@pytest.mark.parametrize("kind", ["fast_dllm_v2", "sdar"])
def test_a_block_causal_refresh_starts_at_the_finished_block(tmp_path, kind, cache):
    model = tiny_block_causal(tmp_path / kind, kind)  # blocks of 4; Fast-dLLM v2 shifts its logits
    shift = int(kind == "fast_dllm_v2")
    out = decode(model, PROMPTS, GenerationConfig(gen_length=GEN, block_length=BLOCK, steps=STEPS, cache=cache,
                                                  stop_at_eos=False))
    assert out.nfe.tolist() == [STEPS, STEPS]
    assert out.token_forwards.tolist() == [_expected(8, shift)] * 2
