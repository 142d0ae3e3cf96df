"""Wall-clock of 2-rank branch-parallel LoPA against 1-rank LoPA on this CPU, one run.

    python bench/branch_parallel_cpu.py --out bench/results/branch_parallel_cpu

Writes a random LLaDA-shaped checkpoint, then runs `dllm bench throughput --branch-parallel`
under torchrun with 1 and 2 processes (one thread each) on the same prompts, and records
wall-clock, tokens/s, TPF and the bytes all-gathered per LoPA round. Tokens must match.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from dllm.models.tiny import write_tiny_checkpoint

LOPA = ["--policy", "threshold", "--policy-arg", "tau=0.9", "--strategy", "lopa", "--strategy-arg", "branches=3",
        "--gen-length", "64", "--block-length", "32", "--no-stop-at-eos", "--batch-size", "1"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--prompts", type=int, default=4)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    model = write_tiny_checkpoint(tmp / "model", "llada", d_model=512, n_layers=8, n_heads=8, mlp_hidden=1408, vocab_size=8000)
    prompts = tmp / "prompts.txt"
    prompts.write_text("\n".join(f"prompt number {i} about the quick brown fox" for i in range(args.prompts)) + "\n")
    results = {}
    for n in (1, 2):
        out = tmp / f"n{n}"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}", "-m", "dllm",
               "bench", "throughput", "--model", str(model), "--prompts", str(prompts), "--out", str(out),
               "--branch-parallel", *LOPA]
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if done.returncode:
            raise SystemExit(done.stderr[-2000:])
        results[n] = json.loads((out / "throughput.json").read_text())
    same = [o["token_ids"] for o in results[1]["outputs"]] == [o["token_ids"] for o in results[2]["outputs"]]
    row = {"params_M": 8 * (4 * 512 * 512 + 3 * 512 * 1408) / 1e6 + 2 * 8000 * 512 / 1e6,
           "wall_1": results[1]["wall_s"], "wall_2": results[2]["wall_s"],
           "speedup_2_over_1": results[1]["wall_s"] / results[2]["wall_s"],
           "tpf": results[2]["tpf"], "tokens_identical": same,
           "comm_bytes_per_round": results[2]["comm_bytes_per_round"]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(row, indent=1) + "\n")
    print(row)


if __name__ == "__main__":
    main()
