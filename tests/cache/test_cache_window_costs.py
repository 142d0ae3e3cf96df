"""What each forward of the prefix and dual caches covers, counted in token-forwards: a block
starts with one refresh over the whole canvas; each sub-block start rebuilds the block (and the
suffix in prefix mode); other steps forward the window (with the suffix in prefix mode). Dream's
shifted logits start each window one position early. The expected counts are summed from those
windows here, position by position, so a refresh made where it is not due (or skipped), or a
window one position off, changes them."""
from __future__ import annotations

import pytest

from dllm import GenerationConfig
from dllm.engine.decoding import decode

GEN, BLOCK, STEPS = 16, 8, 16
PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11]]


def _expected(mode: str, shift: int, prompt_width: int, sub: int | None) -> int:
    """Token-forwards of one row: the sum of every step's forwarded span [lo, hi)."""
    L = prompt_width + GEN
    window = sub or BLOCK
    steps_per_window = STEPS // (GEN // window)
    total = 0
    for block in range(prompt_width, L, BLOCK):
        for start in range(block, block + BLOCK, window):
            for step in range(steps_per_window):
                if step == 0 and start == block:  # block start: the whole canvas
                    lo, hi = 0, L
                elif step == 0:  # a sub-block start: the block again, against the prefix's K/V
                    lo, hi = block - shift, block + BLOCK if mode == "dual" else L
                else:  # the window against the cached K/V
                    lo, hi = start - shift, start + window if mode == "dual" else L
                total += hi - lo
    return total


@pytest.mark.parametrize("sub", [None, 4], ids=["blocks", "sub_blocks"])
@pytest.mark.parametrize("mode", ["prefix", "dual"])
@pytest.mark.parametrize("family", ["llada", "dream"])
def test_token_forwards_are_the_windows_each_step_covers(tiny_models, family, mode, sub):
    model = tiny_models[family].model
    shift = int(model.shift_logits)
    config = GenerationConfig(gen_length=GEN, block_length=BLOCK, steps=STEPS, stop_at_eos=False, cache=mode,
                              sub_block_length=sub)
    for prompts in (PROMPTS[:1], PROMPTS):  # ragged rows are left-padded to the widest prompt
        out = decode(model, prompts, config)
        want = _expected(mode, shift, max(map(len, prompts)), sub)
        assert out.token_forwards.tolist() == [want] * len(prompts), (prompts, want)
        assert out.nfe.tolist() == [STEPS] * len(prompts)
