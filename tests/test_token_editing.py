"""Token editing (LLaDA2.1) is an engine capability: it reproduces the official editing loop,
composes with caches and batching, and counts its edits."""
from __future__ import annotations

import pytest

import dllm
from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.models.tiny import write_tiny_checkpoint
from tests.oracles_block import llada21_generate

BLOCK = 32  # the LLaDA2 family's block size
PROMPTS = [[5, 17, 42], list(range(30, 70)), [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], list(range(40, 72))]
TAU, EDIT, POST = 0.05, 0.1, 3  # the tiny random model is unsure: low thresholds make both happen


@pytest.fixture(scope="module")
def llada2_lm(tmp_path_factory):
    path = write_tiny_checkpoint(tmp_path_factory.mktemp("llada2"), "llada2_moe", seed=3)
    return dllm.load(path, device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def llada2(llada2_lm):
    return llada2_lm.model


def _official(model, prompt: list[int]) -> tuple[list[int], list[int]]:
    """The official LLaDA2.1 loop's answer and the answer positions it edited, one per edit."""
    edits: list[int] = []
    answer = llada21_generate(model, prompt, gen_length=32, block_length=BLOCK, threshold=TAU,
                              editing_threshold=EDIT, max_post_steps=POST, eos_id=model.eos_token_ids[0],
                              edits=edits)
    return answer, edits


def _config(**options) -> GenerationConfig:
    fields = dict(gen_length=32, block_length=BLOCK, policy="threshold", policy_args={"tau": TAU},
                  edit_threshold=EDIT, max_post_steps=POST)
    return GenerationConfig(**{**fields, **options})


def test_editing_reproduces_the_official_llada21_loop(llada2):
    out = decode(llada2, PROMPTS, _config())
    for row, prompt in enumerate(PROMPTS):
        expected, edits = _official(llada2, prompt)
        assert out.answer[row].tolist()[: len(expected)] == expected
        assert int(out.edits[row]) == len(edits)  # the same rewrites, counted as the official loop does
    assert int(out.edits.sum()) > 0  # the test exercises edits, not only commits


def test_editing_changes_the_tokens_and_is_counted(llada2):
    plain = decode(llada2, PROMPTS, _config(edit_threshold=None))
    edited = decode(llada2, PROMPTS, _config())
    assert plain.edits is None
    assert edited.answer.tolist() != plain.answer.tolist()
    assert (edited.nfe >= plain.nfe).all()  # edit forwards are charged


@pytest.mark.parametrize("stop_at_eos", [True, False])
@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_ragged_batch_equals_single_runs_under_every_cache(llada2, cache, stop_at_eos):
    """Also without stop_at_eos, where a row whose answer ends a window early (PROMPTS[3]: one
    block) stays in the batch: it edits nothing past its end and is charged no forward there."""
    batch = decode(llada2, PROMPTS, _config(cache=cache, stop_at_eos=stop_at_eos))
    reference = decode(llada2, PROMPTS, _config(stop_at_eos=stop_at_eos))  # block-causal caches are exact
    assert batch.answer.tolist() == reference.answer.tolist()
    for row, prompt in enumerate(PROMPTS):
        single = decode(llada2, [prompt], _config(cache=cache, stop_at_eos=stop_at_eos))
        assert batch.answer[row].tolist() == single.answer[0].tolist()
        assert int(batch.nfe[row]) == int(single.nfe[0])
        assert int(batch.edits[row]) == int(single.edits[0])


def test_editing_composes_with_a_bidirectional_model_and_the_dual_cache(tiny_models):
    model = tiny_models["llada"].model
    prompts = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13]]
    cfg = GenerationConfig(gen_length=16, block_length=8, policy="threshold", policy_args={"tau": 0.05},
                           edit_threshold=0.05, max_post_steps=2, cache="dual")
    batch = decode(model, prompts, cfg)
    for row, prompt in enumerate(prompts):
        single = decode(model, [prompt], cfg)
        assert batch.answer[row].tolist() == single.answer[0].tolist()
        assert int(batch.edits[row]) == int(single.edits[0])


def test_generate_reports_the_official_loops_edits(llada2_lm):
    prompt = PROMPTS[1]
    out = llada2_lm.generate_ids([prompt], _config())
    _, edits = _official(llada2_lm.model, prompt)
    assert out.stats[0]["edits"] == len(edits) > 0


@pytest.mark.parametrize("bad, match", [
    (dict(edit_threshold=1.5), "edit_threshold must be in"),
    (dict(edit_threshold=0.5, strategy="freedave"), "runs with strategy 'plain'"),
    (dict(max_post_steps=-1), "max_post_steps must be >= 0"),
])
def test_bad_editing_options_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        GenerationConfig(gen_length=8, **bad)
