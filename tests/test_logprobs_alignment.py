"""Commit-time logprobs sit at each row's own answer positions, also when a block-causal row's
prompt tail leads its answer region (dllm/engine/block_alignment.py); a constrained row reports the
model's own distribution, read before the constraint's mask."""
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


def test_a_constrained_rows_logprobs_are_the_models_own(tiny_models):
    """Under a constraint the commit is the masked argmax, but the reported distribution is the
    forward's, read before the mask: on a random model its top token is often one the language
    forbids, where a masked distribution's top would always be the committed token."""
    from dllm.samplers.constraints import RowConstraint, compile_regex, token_bytes

    lm = tiny_models["llada"]
    model = lm.model
    dfa = compile_regex("(yes|no)( (yes|no))*", tuple(token_bytes(lm.tokenizer, model.config.vocab_size)),
                        model.eos_token_ids[0])
    cfg = GenerationConfig(gen_length=12, block_length=12, policy="low_confidence")
    decoding = Decoding(model, [RowStart(prefix=[5, 17, 42], gen_length=12, constraint=RowConstraint(dfa=dfa))], cfg)
    decoding.state.logprobs = CommitLogprobs(*decoding.state.order.shape, top=2, device=model.device)
    result = decoding.run()
    entries = decoding.state.logprobs.read(0, 0, 12, 2)
    answer = result.answer[0].tolist()
    assert all(math.isfinite(e.logprob) and e.logprob <= e.top[0][1] for e in entries)
    assert any(e.top[0][0] != token for e, token in zip(entries, answer)), "the logprobs were read after the mask"
