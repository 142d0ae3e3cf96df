"""FreeDave with a ragged batch whose rows finish blocks at different rounds: every rule at
K = 8 gives its base decode's tokens, and each row its single run's tokens and NFE. A row with
nothing left to decode takes no step (before, it "accepted" all K drafts every round and the
batch-wide step count tripped the engine's progress guard)."""
from __future__ import annotations

import pytest

from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.samplers import RULES
from tests.rule_configs import RULE_OPTIONS, EndsAt, rule_config, save_filter

# row 2 (two prompt tokens) starts its answer at position id 2, where EndsAt predicts end-of-text
PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13], [100, 3], [55, 66, 77, 88, 99]]


@pytest.fixture(scope="module")
def filter_dir(tmp_path_factory):
    return save_filter(tmp_path_factory.mktemp("filter"), 8)


def _check(model, cfg: GenerationConfig) -> None:
    fast = decode(model, PROMPTS, cfg)
    base = decode(model, PROMPTS, GenerationConfig(**{**_fields(cfg), "strategy": "plain", "strategy_args": {}}))
    assert fast.answer.tolist() == base.answer.tolist()
    for row, prompt in enumerate(PROMPTS):
        single = decode(model, [prompt], cfg)
        assert fast.answer[row].tolist() == single.answer[0].tolist(), f"row {row}"
        assert int(fast.nfe[row]) == int(single.nfe[0]), f"row {row}"


def _fields(cfg: GenerationConfig) -> dict:
    return {name: getattr(cfg, name) for name in GenerationConfig.__dataclass_fields__}


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("rule", sorted(RULE_OPTIONS))
def test_every_rule_with_finished_rows(tiny_models, filter_dir, family, rule):
    cfg = GenerationConfig(gen_length=16, block_length=8, steps=16, strategy="freedave",
                           strategy_args={"num_drafts": 8}, **rule_config(rule, filter_dir))
    _check(EndsAt(tiny_models[family].model), cfg)


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("cache", ["none", "prefix", "dual", "adaptive"])
def test_freedave_plus_plus_every_cache(tiny_models, family, cache):
    """The reported case: threshold base rule (FreeDave++), K = 8, every cache mode."""
    cfg = GenerationConfig(gen_length=32, block_length=16, steps=32, policy="threshold",
                           policy_args={"tau": 0.9}, cache=cache, strategy="freedave",
                           strategy_args={"num_drafts": 8})
    _check(EndsAt(tiny_models[family].model), cfg)



class CommitsOnlyCertain:
    """No one-token floor: commits only near-certain predictions (EndsAt's end-of-text)."""

    def __call__(self, inp):
        return inp.eligible & (inp.stats.prob > 0.99)


@pytest.mark.parametrize("strategy", [dict(), dict(strategy="freedave", strategy_args={"num_drafts": 8})],
                         ids=["plain", "freedave"])
def test_progress_guard_names_the_stuck_rows(tiny_models, monkeypatch, strategy):
    """A rule that stops committing ends the decode with an error naming the rows it left
    stuck (not the row that ended early)."""
    monkeypatch.setitem(RULES, "certain", CommitsOnlyCertain)
    cfg = GenerationConfig(gen_length=16, block_length=8, steps=16, policy="certain", **strategy)
    with pytest.raises(RuntimeError, match=r"'certain' made no progress in block 0 \(rows \[0, 1, 3\]\)"):
        decode(EndsAt(tiny_models["llada"].model), PROMPTS, cfg)
