"""The bundled trained model: it loads by default, answers waiting-line prompts, and the exactness
claims of the strategies hold on it (not only on random tiny models)."""
from __future__ import annotations

import pytest

import dllm
from dllm import GenerationConfig
from dllm.api.model import default_model_path
from dllm.bench.metrics import score
from dllm.data.prompts import load_task_configs
from dllm.engine.decoding import decode
from dllm.train.corpus import TaskCorpus
from tests.pb_data import require_data

TASKS = ("waiting_line/copy", "waiting_line/reverse", "waiting_line/insert_index", "puzzle/latin_square_n4")


@pytest.fixture(scope="module")
def trained():
    if not (default_model_path() / "config.json").is_file():
        pytest.skip("the bundled trained model is not in this checkout")
    return dllm.load()


@pytest.fixture(scope="module")
def examples():
    corpus = TaskCorpus(require_data(), seed=4242)  # fresh draws, never the official test lists
    return [corpus.sample(task) for task in TASKS]


def test_default_load_is_the_bundled_model_and_it_solves_held_out_prompts(trained, examples):
    assert trained.path == default_model_path()
    specs = load_task_configs(require_data())
    solved = 0
    for ex in examples:
        out = trained.generate(ex.messages, gen_length=ex.gen_length, steps=ex.gen_length)
        solved += score(specs[ex.task].metric, out.texts[0], ex.sample)
    assert solved >= 3, "the trained model should solve most fresh copy / reverse / index / Latin prompts"


def _ragged(trained, examples) -> list[list[int]]:
    return [trained.encode(ex.messages) for ex in examples[:3]]  # waiting-line prompts, ragged lengths


@pytest.mark.parametrize("cache", ["none", "dual"])
@pytest.mark.parametrize("K", [2, 4, 8])
def test_freedave_is_lossless_on_the_trained_model(trained, examples, cache, K):
    prompts = _ragged(trained, examples)
    cfg = dict(gen_length=32, block_length=32, steps=32, cache=cache)
    base = decode(trained.model, prompts, GenerationConfig(**cfg))
    fast = decode(trained.model, prompts, GenerationConfig(strategy="freedave", strategy_args={"num_drafts": K}, **cfg))
    assert fast.answer.tolist() == base.answer.tolist()
    assert int(fast.nfe.sum()) < int(base.nfe.sum())  # a confident model accepts long chains


@pytest.mark.parametrize("cache", ["none", "dual"])
def test_ssd_is_lossless_and_its_tree_saves_forwards_on_the_trained_model(trained, examples, cache):
    """SSD equals the stepwise decode; its swap nodes take steps the chain (FreeDave's
    acceptance) cannot, so it needs fewer forwards than FreeDave at the same depth."""
    prompts = _ragged(trained, examples)
    cfg = dict(gen_length=32, block_length=32, steps=32, cache=cache)
    base = decode(trained.model, prompts, GenerationConfig(**cfg))
    ssd = decode(trained.model, prompts, GenerationConfig(strategy="ssd", strategy_args={"num_drafts": 8}, **cfg))
    chain = decode(trained.model, prompts, GenerationConfig(strategy="freedave", strategy_args={"num_drafts": 8}, **cfg))
    assert ssd.answer.tolist() == base.answer.tolist()
    assert int(ssd.nfe.sum()) < int(chain.nfe.sum()) < int(base.nfe.sum()), (ssd.nfe, chain.nfe, base.nfe)


def test_freedave_plus_plus_equals_threshold_on_the_trained_model(trained, examples):
    prompts = _ragged(trained, examples)
    cfg = dict(gen_length=32, block_length=8, steps=32, policy="threshold", policy_args={"tau": 0.9})
    base = decode(trained.model, prompts, GenerationConfig(**cfg))
    fast = decode(trained.model, prompts, GenerationConfig(strategy="freedave", strategy_args={"num_drafts": 4}, **cfg))
    assert fast.answer.tolist() == base.answer.tolist()


@pytest.mark.parametrize("options", [dict(cache="dual"), dict(strategy="lopa", strategy_args={"branches": 3})],
                         ids=["threshold+dual", "lopa"])
def test_batch_equals_single_on_the_trained_model(trained, examples, options):
    prompts = _ragged(trained, examples)
    cfg = GenerationConfig(gen_length=32, block_length=8, steps=32, policy="threshold", policy_args={"tau": 0.9},
                           **options)
    batch = decode(trained.model, prompts, cfg)
    for row, prompt in enumerate(prompts):
        single = decode(trained.model, [prompt], cfg)
        assert single.answer[0].tolist() == batch.answer[row].tolist()
        assert int(single.nfe[0]) == int(batch.nfe[row])
