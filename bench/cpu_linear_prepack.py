"""The CPU GEMMs of a decode step: ``nn.Linear`` against ``PrepackedLinear`` (``load(prepack=True)``).

    python bench/cpu_linear_prepack.py --out bench/results/cpu_linear_prepack

For the linear shapes of the small (d 384, mlp 1024, vocab 16000) and 134M (d 768, mlp 2048,
vocab 32000) random LLaDAs of ``bench/fastdllm_compare.py``, and the row counts a step sees (one
row, a few head rows, the 32-token window, a 160-token refresh), one thread: GFLOP/s of both, the
two timed alternately (A B A B ...), median of ``--reps`` rounds of ``--iters`` calls each, and
the largest difference of the outputs relative to their largest magnitude. Writes JSON + markdown.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from dllm.bench.results_store import cpu_model
from dllm.models.prepack import PrepackedLinear

SHAPES = {  # (in_features, out_features) of each linear
    "small": {"q/k/v/o": (384, 384), "gate/up": (384, 1024), "down": (1024, 384), "lm_head": (384, 16000)},
    "134m": {"q/k/v/o": (768, 768), "gate/up": (768, 2048), "down": (2048, 768), "lm_head": (768, 32000)},
}


def seconds_per_call(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, iters: int) -> float:
    """Mean wall time of ``iters`` calls of ``fn(x)``."""
    start = time.perf_counter()
    for _ in range(iters):
        fn(x)
    return (time.perf_counter() - start) / iters


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="output stem (.json and .md are written)")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 32, 160])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows = []
    with torch.no_grad():
        for model, linears in SHAPES.items():
            for name, (k, n) in linears.items():
                linear = nn.Linear(k, n, bias=False).requires_grad_(False)
                packed = PrepackedLinear(linear)
                for m in args.rows:
                    x = torch.randn(m, k)
                    ref, got = linear(x), packed(x)
                    plain_s, packed_s = [], []
                    for fn in (linear, packed):  # warm-up
                        seconds_per_call(fn, x, 2)
                    for _ in range(args.reps):
                        plain_s.append(seconds_per_call(linear, x, args.iters))
                        packed_s.append(seconds_per_call(packed, x, args.iters))
                    flops = 2 * m * k * n
                    row = {"model": model, "linear": name, "rows": m, "in": k, "out": n,
                           "default_gflops": flops / statistics.median(plain_s) / 1e9,
                           "prepacked_gflops": flops / statistics.median(packed_s) / 1e9,
                           "speedup": statistics.median(a / b for a, b in zip(plain_s, packed_s)),
                           "max_rel_diff": float((got - ref).abs().max() / ref.abs().max())}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    machine = f"{cpu_model()}, {args.threads} thread(s)"
    setup = {"machine": machine, "torch": torch.__version__, "iters": args.iters, "reps": args.reps}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"setup": setup, "rows": rows}, indent=1) + "\n")
    md = [f"nn.Linear (torch's default CPU GEMM) vs PrepackedLinear (oneDNN, weight reordered at load), float32, "
          f"{machine}, torch {torch.__version__}; GFLOP/s from the median of {args.reps} alternating rounds of "
          f"{args.iters} calls; speedup = median per-round ratio; max rel diff = largest output difference over "
          "the largest output magnitude.", "",
          "| model | linear | in x out | rows | default GFLOP/s | prepacked GFLOP/s | speedup | max rel diff |",
          "|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['model']} | {r['linear']} | {r['in']} x {r['out']} | {r['rows']} | {r['default_gflops']:.1f} | "
           f"{r['prepacked_gflops']:.1f} | {r['speedup']:.2f}x | {r['max_rel_diff']:.1e} |" for r in rows]
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
