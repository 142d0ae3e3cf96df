"""``dllm bench parallelbench`` without --shots follows the prompt protocol a checkpoint declares it
was trained with (config.json ``dllm_prompt_shots``; bundled models trained zero-shot only), else the
benchmark's own (one-shot for waiting-line and puzzle tasks), and prints which."""
from __future__ import annotations

import argparse
import json

import pytest

from dllm.bench.parallelbench_cli import PROMPT_SHOTS_KEY, choose_shots, declared_shots
from dllm.cli import main as cli_main
from dllm.models.bundled import resolve_model_path
from tests.pb_data import require_data


def _args(model=None, shots=None):
    return argparse.Namespace(model=model, revision=None, shots=shots)


# models trained on zero-shot prompts only declare it; those trained on one-shot prompts too
# (bench/train_any_length.sh) declare nothing and take the benchmark's own protocol
@pytest.mark.parametrize("name", ["dllm-waitingline-d2f", "dllm-waitingline-gemma"])
def test_bundled_models_declare_the_zero_shot_prompts_they_were_trained_on(name):
    assert declared_shots(resolve_model_path(name)) == 0
    shots, line = choose_shots(_args(name))
    assert shots == 0 and line.startswith("protocol: 0-shot") and f"{PROMPT_SHOTS_KEY}=0" in line


@pytest.mark.parametrize("name", ["dllm-waitingline-llada", "dllm-waitingline-dream", "dllm-waitingline-bd",
                                  "dllm-waitingline-moe"])
def test_bundled_models_trained_one_shot_too_take_the_benchmarks_protocol(name):
    assert declared_shots(resolve_model_path(name)) is None
    shots, line = choose_shots(_args(name))
    assert shots is None and line.startswith("protocol: the benchmark's")


def test_an_undeclared_checkpoint_gets_the_benchmarks_protocol_and_shots_wins(tiny_dirs, tmp_path):
    shots, line = choose_shots(_args(str(tiny_dirs["llada"])))
    assert shots is None and line.startswith("protocol: the benchmark's") and "--shots 0" in line
    assert choose_shots(_args(None, shots=1)) == (1, "protocol: 1-shot (--shots 1)")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({PROMPT_SHOTS_KEY: "zero"}))
    with pytest.raises(ValueError, match="must be 0 or 1"):
        declared_shots(bad)


def test_default_command_scores_the_bundled_model_in_the_benchmarks_protocol(tmp_path, capsys):
    """A new user's first run: the default model, trained on one-shot prompts too, copies the
    list in the benchmark's own one-shot protocol (it scored 0 there when trained zero-shot only)."""
    require_data()
    out = tmp_path / "pb"
    assert cli_main(["bench", "parallelbench", "--tasks", "waiting_line/copy", "--limit", "2",
                     "--tokens-per-step", "1", "--out", str(out)]) == 0
    assert "protocol: the benchmark's" in capsys.readouterr().out
    rows = json.loads((out / "summary.json").read_text())["rows"]
    assert [(r["shots"], r["score"]) for r in rows] == [(1, 1.0)]
