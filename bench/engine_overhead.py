"""The engine's own share of decode time: wall time spent outside model forwards.

    python bench/engine_overhead.py --out bench/results/engine_overhead --label after

A random 134M LLaDA (d 768, 12 layers, vocab 32000), gen 256, block 32, dual cache, confidence
threshold 0.9, one thread. The model's forward is wrapped in a timer and a profiler range
(``model_forward``); the decode runs once with the timer only and once under
``torch.profiler`` (CPU activities), and the share outside the forwards is reported for both
(the profiler adds a cost to every op, which weighs more on the engine's many small ops, so its
share is an upper bound). ``--label`` names the run (e.g. before / after a change); results are
appended to OUT.json and the markdown table is rewritten from all of them. ``--prepack`` loads
the model with ``prepack=True`` (faster forwards, so the same engine time is a larger share).
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

import dllm
from dllm import GenerationConfig
from dllm.bench.results_store import cpu_model
from dllm.engine.decoding import decode
from dllm.models.tiny import write_tiny_checkpoint

SHAPE = dict(d_model=768, n_layers=12, n_heads=12, mlp_hidden=2048, vocab_size=32000)


class TimedForward:
    """Wraps a model's forward: accumulates its wall time, marks it for the profiler."""

    def __init__(self, forward) -> None:
        self.forward, self.seconds, self.calls = forward, 0.0, 0

    def __call__(self, *args, **kwargs):
        t = time.perf_counter()
        with torch.profiler.record_function("model_forward"):
            out = self.forward(*args, **kwargs)
        self.seconds += time.perf_counter() - t
        self.calls += 1
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="output stem (.json and .md)")
    ap.add_argument("--label", required=True, help="name of this run, e.g. before / after")
    ap.add_argument("--gen-length", type=int, default=256)
    ap.add_argument("--block-length", type=int, default=32)
    ap.add_argument("--prompt-length", type=int, default=32)
    ap.add_argument("--threshold", type=float, default=0.9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prepack", action="store_true", help="load with prepack=True (CPU oneDNN weights)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    G, B = args.gen_length, args.block_length
    config = GenerationConfig(gen_length=G, block_length=B, steps=G // B, cache="dual", policy="threshold",
                              policy_args={"tau": args.threshold}, stop_at_eos=False)
    with tempfile.TemporaryDirectory() as tmp:
        lm = dllm.load(write_tiny_checkpoint(tmp, "llada", **SHAPE), prepack=args.prepack)
        model = lm.model
        prompt = [[11 + i % 200 for i in range(args.prompt_length)]]
        decode(model, prompt, GenerationConfig(gen_length=B, block_length=B, steps=1, cache="dual",
                                               stop_at_eos=False))  # warm-up
        timed = model.forward = TimedForward(model.forward)
        t = time.perf_counter()
        out = decode(model, prompt, config)
        wall = time.perf_counter() - t
        timer = {"wall_s": wall, "forward_s": timed.seconds, "forwards": timed.calls,
                 "outside_share": 1 - timed.seconds / wall, "nfe": int(out.nfe[0])}
        timed.seconds, timed.calls = 0.0, 0
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            t = time.perf_counter()
            decode(model, prompt, config)
            wall = time.perf_counter() - t
        forward_us = sum(e.cpu_time_total for e in prof.key_averages() if e.key == "model_forward")
        profiled = {"wall_s": wall, "forward_s": forward_us / 1e6, "outside_share": 1 - forward_us / 1e6 / wall}
        del model.forward
    row = {"label": args.label, "timer": timer, "profiler": profiled, "gen_length": G, "block_length": B,
           "prompt_length": args.prompt_length, "threshold": args.threshold,
           "prepack": args.prepack, "machine": f"{cpu_model()}, {args.threads} thread(s)", "torch": torch.__version__}
    print(json.dumps(row), flush=True)
    path = args.out.with_suffix(".json")
    rows = json.loads(path.read_text())["rows"] if path.exists() else []
    rows = [r for r in rows if r["label"] != args.label] + [row]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"model": {"family": "llada", **SHAPE}, "rows": rows}, indent=1) + "\n")
    md = [f"Engine share of decode time: random 134M LLaDA, gen {G}, block {B}, prompt {args.prompt_length}, "
          f"dual cache, threshold {args.threshold}, {row['machine']}, torch {torch.__version__}.", "",
          "| run | NFE | wall s | in forwards s | outside forwards (timer) | outside forwards (profiler) |",
          "|---|---|---|---|---|---|"]
    md += [f"| {r['label']} | {r['timer']['nfe']} | {r['timer']['wall_s']:.1f} | {r['timer']['forward_s']:.1f} | "
           f"{100 * r['timer']['outside_share']:.1f}% | {100 * r['profiler']['outside_share']:.1f}% |" for r in rows]
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
