"""APD and guided diffusion on the shipped models with the shipped helper (dllm-waitingline-ar):
the released loops' tokens and rounds (tests/oracles_apd.py) in a ragged batch, with fewer rounds
than tokens, which random tiny models rarely show."""
from __future__ import annotations

import pytest

import dllm
from dllm import GenerationConfig
from dllm.engine.decoding import decode
from tests.oracles_apd import apd_generate, guided_generate


@pytest.fixture(scope="module")
def bundled():
    """The shipped Dream- and LLaDA-layout models with the shipped helper, and three fresh
    waiting-line prompts of ragged lengths (their chat template)."""
    from dllm.train.corpus import TaskCorpus
    from tests.pb_data import require_data

    corpus = TaskCorpus(require_data(), seed=4242)
    messages = [corpus.sample(task).messages for task in ("waiting_line/copy", "waiting_line/reverse",
                                                          "waiting_line/sort")]
    out = {}
    for name in ("dllm-waitingline-dream", "dllm-waitingline-llada"):
        lm = dllm.load(name, device="cpu", dtype="float32", helper="dllm-waitingline-ar")
        out[name] = (lm.model, [lm.encode(m) for m in messages])
    return out


@pytest.mark.parametrize("strategy", ["apd", "guided"])
@pytest.mark.parametrize("name", ["dllm-waitingline-dream", "dllm-waitingline-llada"])
def test_bundled_models_with_the_bundled_helper_equal_released_loops(bundled, name, strategy):
    """On the shipped models with the shipped helper: the released loop's tokens and rounds, in a
    ragged batch, and fewer rounds than tokens."""
    model, prompts = bundled[name]
    eos = model.eos_token_ids[0]
    args = {"mixture_weight": 0.7} if strategy == "apd" else {}
    batch = decode(model, prompts, GenerationConfig(gen_length=32, block_length=32, strategy=strategy,
                                                    strategy_args=args))
    for row, prompt in enumerate(prompts):
        if strategy == "apd":
            want, rounds = apd_generate(model, model.helper.model, prompt, gen_length=32, mixture_weight=0.7,
                                        max_lookahead=None, eos_id=eos)
        else:
            want, rounds = guided_generate(model, model.helper.model, prompt, gen_length=32, eos_id=eos)
        end = want.index(eos) + 1 if eos in want else len(want)
        assert batch.answer[row].tolist()[:end] == want[:end], row
        assert int(batch.nfe[row]) == rounds < end, row
