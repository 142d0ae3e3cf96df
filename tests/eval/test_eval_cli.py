"""``python -m dllm.eval`` on the bundled model and the local tasks in tests/eval/tasks: the
generation score equals dllm's own ParallelBench harness on the same samples and settings, the
multiple choice scored by likelihood is far above chance, and its shuffled-label control is not."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import dllm
from dllm.bench.parallelbench import Run, run_parallelbench
from dllm.bench.results_store import read_samples

TASKS = Path(__file__).resolve().parent / "tasks"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    out = tmp_path_factory.mktemp("lmeval")
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(out / "hf"),
           "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "dllm.eval", "--model", "dllm", "--model_args",
               "policy=threshold,mc_num=4,greedy_check=false", "--tasks",
               "dllm_reverse_gen,dllm_reverse_choice,dllm_reverse_choice_shuffled", "--include_path", str(TASKS),
               "--device", "cpu", "--batch_size", "16", "--apply_chat_template", "--output_path", str(out / "out")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (results,) = (out / "out").glob("*/results_*.json")
    return out / "out", json.loads(results.read_text())["results"]


def test_generation_score_equals_the_parallelbench_harness(evaluated, tmp_path):
    out, results = evaluated
    data = tmp_path / "data"  # the same documents as a ParallelBench task folder, prompt pre-rendered
    (data / "waiting_line").mkdir(parents=True)
    (data / "waiting_line" / "reverse.jsonl").write_text((TASKS / "reverse.jsonl").read_text())
    (data / "waiting_line" / "task_config.yaml").write_text(yaml.safe_dump(
        {"waiting_line/reverse": {"prompt": "{prompt}", "metric": "list_match_score", "icl_example_count": 0}}))
    run = Run(name="threshold", line="threshold", options={"policy": "threshold"})
    summary = run_parallelbench(dllm.load(), data, [run], tasks=["waiting_line/reverse"], shots=0, limit=None,
                                batch_size=16, out_dir=tmp_path / "pb")
    theirs = read_samples(tmp_path / "pb", "threshold", "waiting_line/reverse")
    records = [json.loads(line) for line in (out / "dllm_requests.rank0.jsonl").read_text().splitlines()]
    ours = {r["doc_id"]: r for r in records if r["task"] == "dllm_reverse_gen"}
    assert [ours[i]["text"] for i in range(len(theirs))] == [s["output"] for s in theirs]
    assert [ours[i]["nfe"] for i in range(len(theirs))] == [s["nfe"] for s in theirs]
    score = summary["runs"][0]["tasks"]["waiting_line/reverse"]["score"]
    assert results["dllm_reverse_gen"]["list_match,none"] == pytest.approx(score)
    assert results["dllm_reverse_gen"]["exact_match,none"] == pytest.approx(score)  # the model writes clean lists


def test_multiple_choice_by_likelihood_is_far_above_chance_and_its_control_is_not(evaluated):
    _, results = evaluated
    n, chance = 32, 1 / 3
    band = 3 * (chance * (1 - chance) / n) ** 0.5  # three binomial standard deviations
    assert results["dllm_reverse_choice"]["acc,none"] > chance + band + 0.2
    assert abs(results["dllm_reverse_choice_shuffled"]["acc,none"] - chance) < band


def test_speed_is_written_next_to_the_scores(evaluated):
    out, _ = evaluated
    rows = {r["task"]: r for r in json.loads((out / "dllm_speed.json").read_text())["rows"]}
    assert rows["dllm_reverse_gen"]["requests"] == 32 and rows["dllm_reverse_gen"]["tpf"] > 1  # threshold: parallel
    assert rows["dllm_reverse_gen"]["tokens_per_s"] > 0
    assert rows["dllm_reverse_choice"]["request_type"] == "loglikelihood" and rows["dllm_reverse_choice"]["nfe"] == 1
