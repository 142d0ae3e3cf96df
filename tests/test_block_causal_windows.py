"""A block-causal model's decision windows never cross one of its blocks (dllm/engine/block_alignment.py
model_block_windows): a block_length spanning several model blocks gives the tokens and forwards of
block_length = the model's block, one that would split a model block those of the greatest common
divisor, ragged batches included."""
from __future__ import annotations

import math

import pytest

from dllm.engine.config import GenerationConfig
from dllm.engine.decoding import Decoding, RowStart
from tests.block_causal_tiny import KINDS, PREAMBLE, TAILS, tiny_block_causal


@pytest.fixture(scope="module", params=KINDS)
def model(request, tmp_path_factory):
    return tiny_block_causal(tmp_path_factory.mktemp(request.param), request.param)


def run(model, cfg: GenerationConfig):
    rows = [RowStart(prefix=PREAMBLE[:9] + t, gen_length=cfg.gen_length, seed=i) for i, t in enumerate(TAILS[:3])]
    return Decoding(model, rows, cfg).run()


@pytest.mark.parametrize("policy,args", [("low_confidence", {}), ("threshold", {"tau": 0.3})])
@pytest.mark.parametrize("blocks", [4, 1.5], ids=["four_model_blocks", "one_and_half"])
def test_windows_never_cross_a_model_block(model, policy, args, blocks):
    size = model.config.block_size
    wide_length = int(blocks * size)
    own_length = math.gcd(wide_length, size)
    common = dict(gen_length=3 * wide_length, policy=policy, policy_args=args, stop_at_eos=False)
    wide = run(model, GenerationConfig(block_length=wide_length, **common))
    own = run(model, GenerationConfig(block_length=own_length, **common))
    assert wide.answer.tolist() == own.answer.tolist()
    assert wide.nfe.tolist() == own.nfe.tolist()
