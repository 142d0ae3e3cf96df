"""Tensor parallelism on the commands and composed with data / branch parallel groups, under
torchrun (gloo, CPU): 4 ranks at --tensor-parallel 2 are 2 copies of the model, each split over 2
ranks, and give one process's tokens; bad combinations are refused before any model work."""
from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

import dllm
from dllm import GenerationConfig
from dllm.cli.main import main
from dllm.parallel.groups import check_layout
from dllm.parallel.tensor_plan import TensorPlanError
from dllm.bench.results_store import read_samples
from tests.pb_data import require_data
from torchrun_helpers import cpu_env, torchrun, torchrun_command

MODEL = "dllm-waitingline-llada"
PROMPTS = ["copy the list [a, b, c]", "sort these names: bob, al, cy", "reverse: x y z", "count to five"]
GEN = dict(gen_length=16, block_length=8, steps=16, stop_at_eos=False)
GEN_ARGS = ["--gen-length", "16", "--block-length", "8", "--steps", "16", "--no-stop-at-eos"]
LOPA = dict(policy="threshold", policy_args={"tau": 0.5}, strategy="lopa", strategy_args={"branches": 3})
LOPA_ARGS = ["--policy", "threshold", "--policy-arg", "tau=0.5", "--strategy", "lopa", "--strategy-arg", "branches=3"]


@functools.lru_cache(maxsize=None)
def _model():
    return dllm.load(MODEL, device="cpu", dtype="float32")  # gloo runs on the CPU


def _one_process(prompts, batch: int, **options) -> list[list[int]]:
    out = []
    for i in range(0, len(prompts), batch):
        out += _model().generate(prompts[i : i + batch], GenerationConfig(**GEN, **options)).token_ids
    return out


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("tp-cmd") / "prompts.txt"
    path.write_text("\n".join(PROMPTS) + "\n")
    return path


def _throughput(prompts_file, out, extra, nproc=4):
    return torchrun(["-m", "dllm", "bench", "throughput", "--model", MODEL, "--device", "cpu", "--dtype", "float32",
                     "--prompts", str(prompts_file), "--out", str(out), "--timeout", "60", "--tensor-parallel", "2",
                     *GEN_ARGS, *extra], nproc)


def test_tp2_times_dp2_gives_one_process_tokens(prompts_file, tmp_path):
    done = _throughput(prompts_file, tmp_path, ["--batch-size", "2"])
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "throughput.json").read_text())
    assert (summary["world_size"], summary["tensor_parallel"], summary["groups"]) == (4, 2, 2)
    assert [o["index"] for o in summary["outputs"]] == list(range(len(PROMPTS)))
    # copy g decodes prompts g, g + 2: batches of those two
    expected = dict(zip([0, 2], _one_process([PROMPTS[0], PROMPTS[2]], 2)))
    expected.update(zip([1, 3], _one_process([PROMPTS[1], PROMPTS[3]], 2)))
    assert [o["token_ids"] for o in summary["outputs"]] == [expected[i] for i in range(len(PROMPTS))]
    assert sorted(p.name for p in tmp_path.glob("outputs.rank*.jsonl")) == ["outputs.rank0.jsonl",
                                                                            "outputs.rank2.jsonl"]
    for rank, dealt in ((0, [0, 2]), (2, [1, 3])):  # prompts dealt round-robin to the copies, as documented
        rows = (tmp_path / f"outputs.rank{rank}.jsonl").read_text().splitlines()
        assert [json.loads(row)["index"] for row in rows] == dealt


def test_tp2_times_branch2_lopa_gives_one_process_tokens(prompts_file, tmp_path):
    done = _throughput(prompts_file, tmp_path, ["--branch-parallel", "--batch-size", "2", *LOPA_ARGS])
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "throughput.json").read_text())
    assert summary["mode"] == "branch_parallel" and summary["groups"] == 2
    assert [o["token_ids"] for o in summary["outputs"]] == _one_process(PROMPTS, 2, **LOPA)
    assert summary["comm_bytes_per_round"] > 0


def test_process_counts_the_size_does_not_fit_are_refused_naming_the_launch():
    check_layout(2, 4)
    check_layout(1, 3)
    with pytest.raises(TensorPlanError, match="launch it with torchrun --nproc_per_node 2"):
        check_layout(2, 1)
    with pytest.raises(TensorPlanError, match="groups of 2 processes, but it has 3: .*multiple of 2"):
        check_layout(2, 3)
    with pytest.raises(TensorPlanError, match="exactly 2 processes, this job has 4: .*--nproc_per_node 2"):
        check_layout(2, 4, whole_world=True)


def test_throughput_with_a_world_the_size_does_not_divide_fails_before_loading(prompts_file, tmp_path):
    done = _throughput(prompts_file, tmp_path, [], nproc=3)
    assert done.returncode != 0
    assert "groups of 2 processes, but it has 3" in done.stderr
    assert not (tmp_path / "throughput.json").exists()


def _pb_outputs(out) -> list[str]:
    return [r["output"] for path in sorted((out / "samples").rglob("*.jsonl.gz"))
            for r in read_samples(out, path.parent.name, path.name.removesuffix(".jsonl.gz"))]


def test_parallelbench_at_tp2_scores_as_one_process(tmp_path):
    require_data()
    bench = ["bench", "parallelbench", "--model", MODEL, "--device", "cpu", "--dtype", "float32", "--tasks",
             "waiting_line/copy", "waiting_line/reverse", "--limit", "3", "--tokens-per-step", "2", "-q"]
    done = torchrun(["-m", "dllm", *bench, "--tensor-parallel", "2", "--out", str(tmp_path / "tp")], 2)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("protocol:") == 1 and done.stdout.count("results:") == 1  # rank 0 prints
    assert main([*bench, "--out", str(tmp_path / "one")]) == 0
    tp, one = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("tp", "one"))
    assert [(r["task"], r["score"], r["nfe"]) for r in tp["rows"]] == [(r["task"], r["score"], r["nfe"])
                                                                         for r in one["rows"]]
    assert _pb_outputs(tmp_path / "tp") == _pb_outputs(tmp_path / "one") and _pb_outputs(tmp_path / "one")


def test_lm_eval_at_tp2_answers_as_one_process(tmp_path):
    """``python -m dllm.eval`` with model_args tensor_parallel=2 on 2 ranks: rank 0 writes the
    records and results, and they are one process's."""
    tasks = Path(__file__).resolve().parents[1] / "eval" / "tasks"

    def command(model_args: str, out: str) -> list[str]:
        return ["-m", "dllm.eval", "--model", "dllm", "--model_args", f"policy=threshold,dtype=float32{model_args}",
                "--tasks", "dllm_reverse_gen", "--include_path", str(tasks), "--limit", "4", "--device", "cpu",
                "--batch_size", "2", "--apply_chat_template", "--output_path", str(tmp_path / out)]

    env = cpu_env({"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "hf")})
    jobs = [subprocess.Popen(torchrun_command(command(",tensor_parallel=2", "tp"), 2), env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE),
            subprocess.Popen([sys.executable, *command("", "one")], env=env, text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)]
    for job in jobs:
        _, err = job.communicate(timeout=300)
        assert job.returncode == 0, err[-3000:]
    texts = {}
    for out in ("tp", "one"):
        assert sorted(p.name for p in (tmp_path / out).glob("dllm_requests.rank*.jsonl")) == ["dllm_requests.rank0.jsonl"]
        records = [json.loads(line) for line in (tmp_path / out / "dllm_requests.rank0.jsonl").read_text().splitlines()]
        (results,) = (tmp_path / out).glob("*/results_*.json")  # written once
        texts[out] = ([(r["doc_id"], r["text"], r["nfe"]) for r in records],
                      json.loads(results.read_text())["results"]["dllm_reverse_gen"]["list_match,none"])
    assert texts["tp"] == texts["one"] and len(texts["one"][0]) == 4


def test_lm_eval_model_with_tensor_parallel_outside_torchrun_is_refused_before_loading(monkeypatch):
    from dllm.eval.lm_eval import DllmLM

    def no_load(*_a, **_k):
        raise AssertionError("the model was loaded")

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(dllm, "load", no_load)
    with pytest.raises(TensorPlanError, match="needs 2 processes: launch it with torchrun --nproc_per_node 2"):
        DllmLM(tensor_parallel=2, device="cpu")
