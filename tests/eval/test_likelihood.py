"""The Monte-Carlo log-likelihood: it converges to the masked-diffusion bound (computed here by
enumerating every mask of a short continuation), its standard error shrinks with mc_num, and
a request's estimate does not depend on the batch it shares forwards with."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from dllm.eval.likelihood import mask_draws, mc_loglikelihood
from dllm.models.visibility import KeyVisibility


def _request(model, seed: int, context_len: int = 5, continuation_len: int = 4):
    """Ordinary (non-special) token ids, drawn from ``seed``."""
    special = {model.mask_token_id, model.config.pad_token_id, *model.eos_token_ids}
    ordinary = [t for t in range(model.config.vocab_size) if t not in special]
    g = torch.Generator().manual_seed(seed)
    pick = lambda n: [ordinary[int(i)] for i in torch.randint(len(ordinary), (n,), generator=g)]  # noqa: E731
    return pick(context_len), pick(continuation_len)


@torch.inference_mode()
def exact_bound(model, context: list[int], continuation: list[int]) -> float:
    """E_k E_M [(L / k) sum_{i in M} log p(y_i | masked)], k uniform in 1..L, M a uniform
    k-subset: every subset forwarded on its own, no padding, the shift read off the model."""
    L, P = len(continuation), len(context)
    total = 0.0
    for k in range(1, L + 1):
        subsets = list(itertools.combinations(range(L), k))
        per_k = 0.0
        for subset in subsets:
            tokens = torch.tensor([context + continuation], device=model.device)
            for i in subset:
                tokens[0, P + i] = model.mask_token_id
            logits = model(tokens, torch.arange(tokens.shape[1], device=model.device)[None], KeyVisibility())[0].double()
            if model.shift_logits:  # Dream: position j is predicted by output j - 1
                logits = torch.cat([logits[:1], logits[:-1]])
            logp = torch.log_softmax(logits, dim=-1)
            per_k += (L / k) * sum(float(logp[P + i, continuation[i]]) for i in subset)
        total += per_k / len(subsets)
    return total / L


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_estimate_converges_to_the_enumerated_bound(tiny_models, family):
    model = tiny_models[family].model
    context, continuation = _request(model, seed=3)
    exact = exact_bound(model, context, continuation)
    (est,) = mc_loglikelihood(model, [(context, continuation)], mc_num=1024, batch_size=256, seed=0)
    assert abs(est.mean - exact) < 4 * est.stderr, (est.mean, exact, est.stderr)
    assert est.stderr < 0.02 * abs(exact)


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_standard_error_shrinks_as_mc_num_grows(tiny_models, family):
    model = tiny_models[family].model
    context, continuation = _request(model, seed=5)
    spread, reported = {}, {}
    for mc_num in (4, 64):
        estimates = [mc_loglikelihood(model, [(context, continuation)], mc_num=mc_num, batch_size=64, seed=s)[0]
                     for s in range(12)]
        spread[mc_num] = float(torch.tensor([e.mean for e in estimates]).std())
        reported[mc_num] = sum(e.stderr for e in estimates) / len(estimates)
    # 16x the draws: about 4x less spread across seeds (1/sqrt(n)), reported and measured alike
    assert spread[64] < spread[4] / 2, spread
    assert reported[64] < reported[4] / 2, reported


def test_a_request_gives_the_same_estimate_in_any_batch(tiny_models):
    model = tiny_models["llada"].model
    pairs = [_request(model, seed=7, context_len=3, continuation_len=6), _request(model, seed=8, context_len=9,
                                                                                  continuation_len=2)]
    together = mc_loglikelihood(model, pairs, mc_num=12, batch_size=5, seed=1)  # ragged rows share forwards
    alone = [mc_loglikelihood(model, [p], mc_num=12, batch_size=12, seed=1)[0] for p in pairs]
    for a, b in zip(together, alone):
        assert a.draws == pytest.approx(b.draws, abs=1e-4)
    assert together[0].nfe == 3 and alone[0].nfe == 1  # rows 0-11 over forwards of 5: three of them


def test_mask_draws_cover_every_count_and_mask_exactly_k():
    g = torch.Generator().manual_seed(0)
    masks = mask_draws(6, 12, g)
    counts = masks.sum(1)
    assert counts.min() >= 1 and counts.max() <= 6
    assert sorted(counts.tolist()) == sorted([c for c in range(1, 7) for _ in range(2)])  # stratified: even
    firsts = torch.stack([mask_draws(5, 1, torch.Generator().manual_seed(s))[0] for s in range(2000)]).sum(1)
    share = torch.bincount(firsts, minlength=6)[1:].double() / 2000  # each k about 1/5
    assert torch.all((share - 0.2).abs() < 0.04), share


def test_bad_requests_and_block_causal_models_are_refused(tiny_models, tmp_path):
    import dllm
    from dllm.models.tiny import write_tiny_checkpoint

    model = tiny_models["llada"].model
    with pytest.raises(ValueError, match="at least one token"):
        mc_loglikelihood(model, [([], [5])], mc_num=2, batch_size=2)
    too_long = model.config.max_sequence_length
    with pytest.raises(ValueError, match="exceed the model's context"):
        mc_loglikelihood(model, [([5] * too_long, [5])], mc_num=2, batch_size=2)
    v2 = dllm.load(write_tiny_checkpoint(tmp_path / "v2", "fast_dllm_v2", seed=1)).model
    with pytest.raises(ValueError, match="generate_until tasks only"):
        mc_loglikelihood(v2, [([5], [6])], mc_num=2, batch_size=2)
    assert math.isnan(mc_loglikelihood(model, [([5], [6])], mc_num=1, batch_size=1)[0].stderr)
