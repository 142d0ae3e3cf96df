"""Log-probabilities go through the one dispatch point, ``kernels.log_softmax`` (one program a row
on CUDA: a row's logprobs do not move with its batch), on every device: the answer tokens'
logprobs of a decode and the likelihood eval's. On the CPU the torch reference is the same
arithmetic as a plain ``log_softmax``, so only the count tells a caller that bypasses the
dispatch (mutation audit, round 6: both bypasses passed every logprob and likelihood test)."""
from __future__ import annotations

from dllm.eval.likelihood import mc_loglikelihood
from dllm.kernels import CALL_COUNTS


def _calls(fn) -> int:
    before = CALL_COUNTS["log_softmax"]
    fn()
    return CALL_COUNTS["log_softmax"] - before


def test_answer_logprobs_and_likelihoods_go_through_the_dispatch(tiny_models):
    lm = tiny_models["llada"]
    assert _calls(lambda: lm.generate_ids([[5, 17, 42]], max_tokens=8, block_length=8, steps=8, logprobs=2)) > 0
    assert _calls(lambda: lm.generate_ids([[5, 17, 42]], max_tokens=8, block_length=8, steps=8)) == 0  # none asked
    assert _calls(lambda: mc_loglikelihood(lm.model, [([5, 17], [42, 7])], mc_num=2, batch_size=2)) > 0
