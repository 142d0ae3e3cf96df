"""LoPA on the pipelined mode reproduces LoPA's released D2F loop (``tests/oracles_lopa_d2f.py``)
token for token: branching factors 2-4, the base competing, the mean negative entropy as branch
confidence, lookahead branches winning ties (``ties="branches"``), the fully active blocks'
fallback by lowest entropy (``low_confidence`` with ``rank="neg_entropy"``); on tiny Dream /
LLaDA D2F students and the bundled block-diffusion model, under every cache."""
from __future__ import annotations

import pytest
import torch

from dllm.engine.config import GenerationConfig
from dllm.engine.decoding import decode
from tests.oracles_lopa_d2f import lopa_d2f_generate
from tests.test_pipeline import PROMPTS, bd_with_d2f_mask, cut, d2f_student


@pytest.fixture(scope="module")
def students(tmp_path_factory):
    root = tmp_path_factory.mktemp("lopa_d2f")
    out = {f: d2f_student(root / f, f) for f in ("dream", "llada")}
    out["bd"] = bd_with_d2f_mask(root / "bd")
    return out


def lopa(model, prompts, *, block, skip, add, decoded, factor, cache="none", gen_length=16):
    config = GenerationConfig(gen_length=gen_length, block_length=block, policy="low_confidence",
                              policy_args={"tau": skip, "rank": "neg_entropy"}, block_add_threshold=add,
                              decoded_token_threshold=decoded, cache=cache, strategy="lopa",
                              strategy_args={"branches": factor, "confidence": "neg_entropy", "ties": "branches"})
    return decode(model, prompts, config)


# (skip of Dream, of LLaDA, block_add, decoded_token): random models' confidences are low
SETTINGS = [(0.06, 0.08, 0.25, 0.5), (0.075, 0.1, 0.1, 0.95), (0.06, 0.12, 0.0, 1.0)]


@pytest.mark.parametrize("family", ["dream", "llada"])
@pytest.mark.parametrize("setting", SETTINGS)
def test_tiny_students_match_released_loop(students, family, setting):
    model = students[family]
    skip, add, decoded = setting[0 if family == "dream" else 1], setting[2], setting[3]
    eos = model.eos_token_ids[0]
    for factor in (2, 3, 4):
        for prompt in PROMPTS:
            want = lopa_d2f_generate(model, prompt, gen_length=16, block_size=4, block_add_threshold=add,
                                     decoded_token_threshold=decoded, skip_threshold=skip,
                                     branching_factor=factor, eos_id=eos)
            for cache in ("none", "dual"):
                got = lopa(model, [prompt], block=4, skip=skip, add=add, decoded=decoded, factor=factor, cache=cache)
                assert cut(got.answer[0].tolist(), eos) == cut(want, eos), (factor, prompt, cache)


@pytest.mark.parametrize("skip,add,decoded", [(0.9, 0.1, 0.95), (0.7, 0.3, 0.95)])
def test_trained_model_matches_released_loop(students, skip, add, decoded):
    lm = students["bd"]
    model, eos = lm.model, lm.model.eos_token_ids[0]
    prompts = [lm.encode(t) for t in ("Sort these names: Bob Smith, Alice Jones, Carol White.",
                                      "Reverse the list: Dan Brown, Eve Black.")]
    for factor in (2, 4):
        for prompt in prompts:
            want = lopa_d2f_generate(model, prompt, gen_length=32, block_size=8, block_add_threshold=add,
                                     decoded_token_threshold=decoded, skip_threshold=skip,
                                     branching_factor=factor, eos_id=eos)
            for cache in ("none", "prefix"):
                got = lopa(model, [prompt], block=8, skip=skip, add=add, decoded=decoded, factor=factor,
                           cache=cache, gen_length=32)
                assert cut(got.answer[0].tolist(), eos) == cut(want, eos), (factor, cache)


def test_batch_equals_single_rows_and_cache_saves_work(students):
    """Rows of a ragged batch give their single-run tokens; the append cache's K/V written back
    from the candidates leaves fewer query tokens than no cache, with the same tokens."""
    model = students["dream"]
    opts = dict(block=4, skip=0.06, add=0.25, decoded=0.5, factor=3)
    for cache in ("none", "dual"):
        batch = lopa(model, PROMPTS, cache=cache, **opts)
        for i, prompt in enumerate(PROMPTS):
            assert torch.equal(batch.answer[i], lopa(model, [prompt], cache=cache, **opts).answer[0]), (cache, i)
    none, dual = (lopa(model, PROMPTS[:1], cache=c, **opts) for c in ("none", "dual"))
    assert torch.equal(none.answer, dual.answer) and torch.equal(none.nfe, dual.nfe)
    assert int(dual.token_forwards[0]) < int(none.token_forwards[0])
