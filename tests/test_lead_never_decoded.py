"""A block-causal row's prompt tail, placed at the start of its answer region (blocks counted
from position 0), is prompt: never decoded, even where a prompt token equals the mask id."""
from __future__ import annotations

import pytest

from dllm import GenerationConfig
from dllm.engine.decoding import Decoding, RowStart
from tests.block_causal_tiny import tiny_block_causal


@pytest.mark.parametrize("kind", ["fast_dllm_v2", "sdar"])
def test_a_mask_id_in_the_prompt_tail_stays(tmp_path, kind):
    model = tiny_block_causal(tmp_path / kind, kind)  # blocks of 4 from position 0
    mask = model.mask_token_id
    prompts = [[9, 10, 11, 12, 30, mask], [mask, 21]]  # tails of 2 (one of them all lead)
    decoding = Decoding(model, [RowStart(prefix=p, gen_length=8, seed=i) for i, p in enumerate(prompts)],
                        GenerationConfig(gen_length=8, block_length=4, stop_at_eos=False))
    leads = decoding.state.lead.tolist()
    assert leads == [2, 2]
    decoding.run()
    region = decoding.state.tokens[:, decoding.state.canvas.prompt_width :].tolist()
    for row, prompt in enumerate(prompts):
        assert region[row][: leads[row]] == prompt[-leads[row]:]
    assert mask not in sum(decoding.answer().tolist(), [])
