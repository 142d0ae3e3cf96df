"""The resumable decode: ``Decoding.step()`` rounds, rows with their own gen_length, rows resumed
at a block boundary, and each row's own latency."""
from __future__ import annotations

import pytest
import torch

from dllm import GenerationConfig
from dllm.engine.decoding import Decoding, RowStart, decode

from rule_configs import EndsAt

PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13], [100, 3]]
CONFIGS = {
    "low_confidence": dict(),
    "threshold_dual": dict(policy="threshold", policy_args={"tau": 0.09}, cache="dual"),
    "sampled_prefix": dict(policy="threshold", policy_args={"tau": 0.09}, cache="prefix", temperature=0.8),
    "sub_block": dict(policy="factor", policy_args={"factor": 3.75}, cache="dual", sub_block_length=2),
    "freedave": dict(strategy="freedave", strategy_args={"num_drafts": 3}),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_rows_with_their_own_gen_length_equal_single_runs(tiny_models, name):
    """A row with a shorter gen_length in a batch decodes exactly as alone (tokens and NFE)."""
    model = tiny_models["llada"].model
    lengths = [16, 8, 12]
    cfg = GenerationConfig(gen_length=16, block_length=4, **CONFIGS[name])
    rows = [RowStart(prefix=p, gen_length=g, seed=i) for i, (p, g) in enumerate(zip(PROMPTS, lengths))]
    batch = Decoding(model, rows, cfg).run()
    for i, (prompt, g) in enumerate(zip(PROMPTS, lengths)):
        single = decode(model, [prompt], GenerationConfig(gen_length=g, block_length=4, steps=g, **CONFIGS[name]),
                        seeds=[i])
        assert batch.answer[i, :g].tolist() == single.answer[0].tolist()
        assert int(batch.nfe[i]) == int(single.nfe[0])


@pytest.mark.parametrize("name", CONFIGS)
def test_a_row_resumed_at_a_block_boundary_decodes_as_its_single_run(tiny_models, name):
    """Stop a decode at a block start, resume the row from its finished blocks: same tokens."""
    model = tiny_models["llada"].model
    cfg = GenerationConfig(gen_length=16, block_length=4, **CONFIGS[name])
    whole = decode(model, [PROMPTS[1]], cfg, seeds=[3]).answer[0].tolist()
    first = Decoding(model, [RowStart(prefix=PROMPTS[1], gen_length=16, seed=3)], cfg)
    while first.block < 2:
        first.step()
    state = first.state
    done = first.answer()[0, :8].tolist()
    resumed = Decoding(model, [RowStart(prefix=PROMPTS[1] + done, gen_length=8, seed=3, answer_offset=8,
                                        steps_before=int(state.steps_before[0] + state.row_step[0]))], cfg).run()
    assert done + resumed.answer[0].tolist() == whole


def test_row_seconds_are_each_rows_own(tiny_models):
    """A row that ends early reports its own latency, not the batch's."""
    model = EndsAt(tiny_models["llada"].model)
    cfg = GenerationConfig(gen_length=16, block_length=8)
    # EndsAt puts end-of-text at position id 2: the 2-token prompt's answer ends at once
    result = decode(model, [[100, 3], [7, 8, 9, 10, 11, 12, 13]], cfg)
    assert int(result.nfe[0]) < int(result.nfe[1])
    assert 0 < result.row_seconds[0] < result.row_seconds[1] <= result.wall_time


def test_stepping_equals_decode_and_stop_rows_frees_a_row(tiny_models):
    model = tiny_models["llada"].model
    cfg = GenerationConfig(gen_length=8, block_length=4, policy="threshold", policy_args={"tau": 0.09})
    rows = [RowStart(prefix=p, gen_length=8) for p in PROMPTS]
    decoding = Decoding(model, rows, cfg)
    decoding.step()
    nfe = decoding.state.runner.nfe[1].item()
    decoding.stop_rows(torch.tensor([False, True, False], device=model.device))
    result = decoding.run()
    assert int(result.nfe[1]) == nfe  # the stopped row is no longer charged
    alone = decode(model, [PROMPTS[0], PROMPTS[2]], cfg)
    assert result.answer[[0, 2]].tolist() == alone.answer.tolist()


def test_bad_rows_are_refused_before_model_work(tiny_models):
    model = tiny_models["llada"].model
    cfg = GenerationConfig(gen_length=8, block_length=4)
    with pytest.raises(ValueError, match="not a positive multiple of block_length 4"):
        Decoding(model, [RowStart(prefix=[1, 2], gen_length=6)], cfg)
