"""``generate(..., logprobs=k)`` in the Python API: each kept answer token's logprob and its k
most likely alternatives are the log-softmax of the forward that committed it, computed here by
LLaDA's own loop (tests/oracles.py) on each prompt alone, for the rows of a ragged batch;
refused with the fix where commits are not one forward's, before any model work."""
from __future__ import annotations

import math

import pytest

import dllm
from tests.oracles import llada_generate

BLOCK, GEN = 8, 16
PROMPTS = ["Alice Smith, Bob Jones, Carol White. Who is second?", "Bob"]
TOL = 1e-4  # float32 engine against the float64 oracle (as tests/serve/test_logprob_values.py)


@pytest.fixture(scope="module")
def model():
    return dllm.load()


def oracle(model, prompt: str):
    logprobs = {}
    answer = llada_generate(model.model, model.encode(prompt, chat=False), steps=GEN, gen_length=GEN,
                            block_length=BLOCK, logprobs=logprobs)
    return answer, logprobs


def test_logprobs_in_a_ragged_batch_are_each_rows_committing_forwards(model):
    out = model.generate(PROMPTS, chat=False, max_tokens=GEN, block_length=BLOCK, logprobs=3)
    assert out.logprobs is not None and len(out.logprobs) == len(PROMPTS)
    for row, prompt in enumerate(PROMPTS):
        ids, entries = out.token_ids[row], out.logprobs[row]
        answer, logp = oracle(model, prompt)
        assert 0 < len(ids) == len(entries) and ids == answer[: len(ids)]
        for pos, (token, entry) in enumerate(zip(ids, entries)):
            assert entry.logprob == pytest.approx(logp[pos][token].item(), abs=TOL)
            values, top_ids = logp[pos].topk(3)
            assert [i for i, _ in entry.top] == top_ids.tolist()
            assert [v for _, v in entry.top] == pytest.approx(values.tolist(), abs=TOL)


def test_no_logprobs_unless_asked_and_zero_gives_the_token_alone(model):
    assert model.generate("Bob", chat=False, max_tokens=8, block_length=BLOCK).logprobs is None
    out = model.generate("Bob", chat=False, max_tokens=8, block_length=BLOCK, logprobs=0)
    assert all(e.top == [] and math.isfinite(e.logprob) and e.logprob <= 0 for e in out.logprobs[0])


@pytest.mark.parametrize("kwargs, words", [
    ({"logprobs": 2, "strategy": "lopa"}, "strategy 'plain'"),
    ({"logprobs": 2, "stopper": "sched"}, "stopper 'none' or 'eotp'"),
    ({"logprobs": 21}, "[0, 20]"),
    ({"logprobs": True}, "must be an int"),
    ({"top_logprobs": 2}, "did you mean 'logprobs'"),
])
@pytest.mark.parametrize("call", ["generate", "stream"])
def test_refused_before_model_work(model, monkeypatch, kwargs, words, call):
    def forbidden(*args, **kw):
        raise AssertionError("the model ran")

    monkeypatch.setattr(model.model, "forward", forbidden)
    with pytest.raises((ValueError, TypeError), match=None) as err:  # stream refuses at the call, not the first update
        getattr(model, call)("Bob", chat=False, max_tokens=8, block_length=BLOCK, **kwargs)
    assert words in str(err.value)


def test_stream_updates_carry_generates_logprobs_as_the_prefix_grows(model):
    kwargs = dict(chat=False, max_tokens=GEN, block_length=BLOCK, logprobs=2)
    updates = list(model.stream(PROMPTS[0], **kwargs))
    out = model.generate(PROMPTS[0], **kwargs)
    last = updates[-1]
    assert last.finished and last.final_ids == out.token_ids[0] and last.logprobs == out.logprobs[0]
    grown = [u for u in updates[:-1] if u.final_ids]
    assert len(grown) > 1  # the final prefix grew over several rounds
    for update in grown:  # a final token's logprob never changes once reported
        assert len(update.logprobs) == len(update.final_ids)
        n = min(len(update.logprobs), len(out.logprobs[0]))  # final ids may run past the kept answer's end
        assert n > 0 and update.logprobs[:n] == out.logprobs[0][:n]
    assert all(u.logprobs is None for u in model.stream(PROMPTS[0], chat=False, max_tokens=GEN, block_length=BLOCK))
