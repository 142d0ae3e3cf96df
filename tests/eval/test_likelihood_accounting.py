"""What the Monte-Carlo estimator reports beside its mean: the standard error of the draws, the
token-forwards and wall-time shares of the forwards a request's rows took part in, and the
random stream of each request (keyed by the seed and every token id of the request)."""
from __future__ import annotations

import math
import statistics
from types import SimpleNamespace

import pytest

from dllm.eval import likelihood
from dllm.eval.likelihood import mask_draws, mc_loglikelihood, request_generator

# two ragged requests: 3 + 6 = 9 and 9 + 2 = 11 tokens (ordinary ids of the tiny vocabulary)
SHORT = ([11, 12, 13], [14, 15, 16, 17, 18, 19])
LONG = ([21, 22, 23, 24, 25, 26, 27, 28, 29], [30, 31])


def test_stderr_is_the_sample_standard_deviation_over_the_root_of_mc_num(tiny_models):
    (est,) = mc_loglikelihood(tiny_models["llada"].model, [SHORT], mc_num=6, batch_size=6, seed=2)
    assert len(est.draws) == 6 and est.mean == pytest.approx(statistics.fmean(est.draws), abs=1e-9)
    # the (n - 1) estimate of the spread: a biased (n) one is sqrt(5 / 6) of it
    assert est.stderr == pytest.approx(statistics.stdev(est.draws) / math.sqrt(6), rel=1e-9)


def test_a_request_is_charged_the_padded_width_and_its_share_of_each_forward(tiny_models, monkeypatch):
    """mc_num 3, forwards of 4 rows: the first holds SHORT's 3 rows and LONG's first, the second
    LONG's other 2. Every row of a forward is as wide as its longest request (11, left-padded),
    and a forward's time is split evenly over its rows; a fake clock makes each forward 1 s."""
    ticks = iter(range(100))
    monkeypatch.setattr(likelihood, "time", SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    short, long_ = mc_loglikelihood(tiny_models["llada"].model, [SHORT, LONG], mc_num=3, batch_size=4, seed=0)
    assert (short.nfe, long_.nfe) == (1, 2)
    assert (short.token_forwards, long_.token_forwards) == (3 * 11, 11 + 2 * 11)  # not 3 * 9 for SHORT
    assert (short.seconds, long_.seconds) == pytest.approx((3 / 4, 1 / 4 + 2 / 2))  # the 2 s of the two forwards


def test_each_request_draws_from_a_stream_of_its_own_token_ids():
    """Multiple-choice options share their context: each option is still masked from its own stream."""
    context = [5, 6, 7]
    draws = [mask_draws(4, 8, request_generator(0, context, option)) for option in ([8, 9, 10, 11], [8, 9, 10, 12])]
    assert not draws[0].equal(draws[1])
    again = mask_draws(4, 8, request_generator(0, context, [8, 9, 10, 11]))
    assert again.equal(draws[0])
