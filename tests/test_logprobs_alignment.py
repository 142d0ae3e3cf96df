"""Commit-time logprobs sit at each row's own answer positions, also when a block-causal row's
prompt tail leads its answer region (dllm/engine/block_alignment.py)."""
from __future__ import annotations

import math

import pytest

import dllm
from dllm import GenerationConfig
from dllm.engine.decoding import Decoding, RowStart
from dllm.engine.logprobs import CommitLogprobs
from dllm.models.tiny import write_tiny_checkpoint

PROMPTS = [[5, 17, 42], list(range(30, 43)), [7, 8, 9, 10, 11, 12, 13, 14]]  # leads 3, 5, 0


@pytest.fixture(scope="module")
def block_causal(tmp_path_factory):
    path = write_tiny_checkpoint(tmp_path_factory.mktemp("bd"), "fast_dllm_v2", seed=5, block_size=8)
    return dllm.load(path, device="cpu", dtype="float32").model


def _run(model, prompts):
    cfg = GenerationConfig(gen_length=16, block_length=8, policy="threshold", policy_args={"tau": 0.05},
                           stop_at_eos=False)
    decoding = Decoding(model, [RowStart(prefix=p, gen_length=16) for p in prompts], cfg)
    decoding.state.logprobs = CommitLogprobs(*decoding.state.order.shape, top=2, device=model.device)
    result = decoding.run()
    return result, decoding.state.logprobs


def test_logprobs_follow_each_rows_answer_positions(block_causal):
    batch, batch_lp = _run(block_causal, PROMPTS)
    for row, prompt in enumerate(PROMPTS):
        single, single_lp = _run(block_causal, [prompt])
        assert batch.answer[row].tolist() == single.answer[0].tolist()
        got, want = batch_lp.read(row, 0, 16, 2), single_lp.read(0, 0, 16, 2)
        assert all(math.isfinite(t.logprob) for t in got)  # every answer position was committed
        for a, b in zip(got, want):
            assert a.logprob == pytest.approx(b.logprob, abs=1e-5)
            assert a.top[0][0] == b.top[0][0]
        for position, entry in enumerate(got):  # at temperature 0 the committed token is its forward's argmax
            assert entry.top[0][0] == batch.answer[row, position].item()
            assert entry.logprob == entry.top[0][1]  # one distribution: the token's value is the top value
