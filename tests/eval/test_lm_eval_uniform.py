"""The lm-eval model on DiffusionGemma (uniform-state decoding): generate_until batches give the
texts of single requests; loglikelihood (the masked-diffusion bound) is refused with its reason."""
from __future__ import annotations

import pytest

pytest.importorskip("lm_eval")
from lm_eval.api.instance import Instance  # noqa: E402

from dllm.eval.lm_eval import DllmLM  # noqa: E402
from tests.models.gemma_tiny import CANVAS, write_reference  # noqa: E402


def _gen(context: str, doc_id: int) -> Instance:
    return Instance("generate_until", {}, (context, {"max_gen_toks": 2 * CANVAS}), 0, ("t", doc_id, 1))


def test_generate_until_batches_equal_single_requests(tmp_path):
    write_reference(tmp_path, seed=3, std=0.05)
    args = dict(pretrained=str(tmp_path), device="cpu", block_length=CANVAS, steps=6, gen_length=2 * CANVAS)
    requests = [_gen(p, i) for i, p in enumerate(["a", "the quick brown fox"])]
    batched = DllmLM(batch_size=2, **args).generate_until(requests, disable_tqdm=True)
    single = DllmLM(batch_size=1, **args)
    assert batched == single.generate_until(requests, disable_tqdm=True)
    with pytest.raises(ValueError, match="'encoder_denoiser' attention, so evaluate it on generate_until"):
        single.loglikelihood([Instance("loglikelihood", {}, ("a", " b"), 0, ("t", 0, 1))], disable_tqdm=True)
