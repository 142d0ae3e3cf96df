"""torchrun with 2 processes (gloo, CPU) gives exactly the single-process tokens, and a failing
rank ends the whole run with its error."""
from __future__ import annotations

import json
import time

import pytest

import dllm
from dllm import GenerationConfig
from torchrun_helpers import torchrun

PROMPTS = ["copy the list [a, b, c]", "reverse", "sort these names please", "x y z w v u", "one more prompt here"]
GEN = ["--gen-length", "16", "--block-length", "8", "--steps", "16", "--no-stop-at-eos"]


def _torchrun(model_dir, prompts_file, out_dir, extra, env=None, nproc=2, timeout=600):
    return torchrun(["-m", "dllm", "bench", "throughput", "--model", str(model_dir), "--prompts", str(prompts_file),
                     "--out", str(out_dir), "--timeout", "60", *GEN, *extra], nproc, env, timeout)


@pytest.fixture(scope="module")
def setup(tiny_dirs, tmp_path_factory):
    root = tmp_path_factory.mktemp("tr")
    prompts = root / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n")
    return tiny_dirs["llada"], prompts, root


def _single(model_dir, prompts, **options):
    model = dllm.load(model_dir, device="cpu")  # gloo runs on the CPU, whatever the suite's device
    cfg = GenerationConfig(gen_length=16, block_length=8, steps=16, stop_at_eos=False, **options)
    return model.generate(prompts, cfg).token_ids


def test_data_parallel_matches_single_process_in_order(setup):
    model_dir, prompts, root = setup
    done = _torchrun(model_dir, prompts, root / "dp", ["--batch-size", "2"])
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((root / "dp" / "throughput.json").read_text())
    assert summary["world_size"] == 2 and [o["index"] for o in summary["outputs"]] == list(range(len(PROMPTS)))
    assert [o["token_ids"] for o in summary["outputs"]] == _single(model_dir, PROMPTS)


def _single_outputs(model_dir, prompts, **options):
    model = dllm.load(model_dir, device="cpu")  # gloo runs on the CPU, whatever the suite's device
    cfg = GenerationConfig(gen_length=16, block_length=8, steps=16, stop_at_eos=False, **options)
    out = model.generate(prompts, cfg)
    return [{"token_ids": ids, **{k: st[k] for k in ("nfe", "draft_rows", "token_forwards")}}
            for ids, st in zip(out.token_ids, out.stats)]


@pytest.mark.parametrize("batch, branches, temperature", [(2, 2, 0.7), (1, 0, 0.0)],
                         ids=["tail-batch-sampled", "fewer-candidates-than-ranks"])
def test_branch_parallel_splits_any_candidate_count(setup, batch, branches, temperature):
    """3 candidates per row: the 1-prompt tail batch has 3 candidates for 2 ranks (and at
    branches 0 a single one); tokens, sampling noise and counters still equal one process."""
    model_dir, prompts, root = setup
    options = {"policy": "threshold", "policy_args": {"tau": 0.5}, "strategy": "lopa",
               "strategy_args": {"branches": branches}, "temperature": temperature}
    args = ["--policy", "threshold", "--policy-arg", "tau=0.5", "--strategy", "lopa", "--strategy-arg",
            f"branches={branches}", "--temperature", str(temperature)]
    out = root / f"bp-split-{batch}-{branches}"
    done = _torchrun(model_dir, prompts, out, ["--branch-parallel", "--batch-size", str(batch), *args])
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "throughput.json").read_text())
    expected = []
    for i in range(0, len(PROMPTS), batch):
        expected += _single_outputs(model_dir, PROMPTS[i : i + batch], **options)
    got = [{k: o[k] for k in ("token_ids", "nfe", "draft_rows", "token_forwards")} for o in summary["outputs"]]
    assert got == expected
    assert summary["comm_bytes_per_round"] > 0


@pytest.fixture(scope="module")
def trained_setup(tmp_path_factory):
    """The bundled trained model and five generated waiting-line prompts (official templates)."""
    from dllm.api.model import default_model_path
    from dllm.train.corpus import TaskCorpus
    from tests.pb_data import require_data

    if not (default_model_path() / "config.json").is_file():
        pytest.skip("the bundled trained model is not in this checkout")
    corpus = TaskCorpus(require_data(), seed=321)
    messages = [corpus.sample(task).messages for task in
                ("waiting_line/copy", "waiting_line/reverse", "waiting_line/shuffle", "waiting_line/sort",
                 "waiting_line/replace_random")]
    root = tmp_path_factory.mktemp("trained")
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"messages": m}) + "\n" for m in messages))
    return default_model_path(), prompts, messages, root


def test_branch_parallel_lopa_on_the_trained_model(trained_setup):
    """Batch 2 over five prompts: two full batches and a tail batch of one, so both shapes run."""
    batch = 2
    model_dir, prompts, messages, root = trained_setup
    lopa = ["--gen-length", "32", "--block-length", "32", "--steps", "32",
            "--policy", "threshold", "--policy-arg", "tau=0.9", "--strategy", "lopa", "--strategy-arg", "branches=3"]
    out = root / f"bp{batch}"
    done = _torchrun(model_dir, prompts, out, ["--branch-parallel", "--batch-size", str(batch), *lopa])
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "throughput.json").read_text())
    model = dllm.load(model_dir)
    cfg = GenerationConfig(gen_length=32, steps=32, policy="threshold", policy_args={"tau": 0.9},
                           strategy="lopa", strategy_args={"branches": 3}, stop_at_eos=False)  # as GEN
    expected = []
    for i in range(0, len(messages), batch):
        expected += model.generate(messages[i : i + batch], cfg).token_ids
    got = [o["token_ids"] for o in summary["outputs"]]
    assert got == expected
    assert any(len(set(ids)) > 3 for ids in got)  # real answers, not end-of-text only


def test_a_failing_rank_ends_the_run_with_its_error(setup):
    model_dir, prompts, root = setup
    start = time.monotonic()
    done = _torchrun(model_dir, prompts, root / "fail", [], env={"DLLM_FAIL_RANK": "1"}, timeout=300)
    assert done.returncode != 0
    assert "rank 1 failed: injected failure on rank 1" in done.stderr
    assert time.monotonic() - start < 240
    assert not (root / "fail" / "throughput.json").exists()


def test_a_too_long_prompt_is_reported_with_its_file_line(setup):
    """Prompt 3 (rank 1's second) sits on line 5 of the file: the error names line 5."""
    model_dir, _, root = setup
    prompts = root / "long.txt"
    prompts.write_text("a\nb\n\nc\n" + "abcdefghij " * 300 + "\n")
    done = _torchrun(model_dir, prompts, root / "long", [], timeout=300)
    assert done.returncode != 0
    assert f"{prompts} line 5: the prompt has" in done.stderr
    assert not (root / "long" / "throughput.json").exists()


def test_branch_parallel_lopa_takes_the_pipelined_mode(tmp_path):
    """LoPA over D2F's pipeline (block-causal bundled model, blocks in flight): 2 gloo ranks give
    the single process's tokens; the pipeline itself is unchanged by branch parallelism."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS[:3]) + "\n")
    options = ["--policy", "low_confidence", "--policy-arg", "tau=0.9", "--strategy", "lopa", "--strategy-arg",
               "branches=2", "--block-add-threshold", "0.25", "--decoded-token-threshold", "0.5", "--cache", "dual"]
    done = _torchrun("dllm-waitingline-bd", prompts, tmp_path / "bp", ["--branch-parallel", "--batch-size", "2", *options])
    assert done.returncode == 0, done.stderr[-3000:]
    got = [o["token_ids"] for o in json.loads((tmp_path / "bp" / "throughput.json").read_text())["outputs"]]
    model = dllm.load("dllm-waitingline-bd", device="cpu")
    cfg = GenerationConfig(gen_length=16, block_length=8, steps=16, stop_at_eos=False, policy="low_confidence",
                           policy_args={"tau": 0.9}, strategy="lopa", strategy_args={"branches": 2}, cache="dual",
                           block_add_threshold=0.25, decoded_token_threshold=0.5)
    assert got == model.generate(PROMPTS[:2], cfg).token_ids + model.generate(PROMPTS[2:3], cfg).token_ids
