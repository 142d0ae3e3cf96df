"""The engine's own ops per decode round (outside model forwards), by where they come from.

    python bench/engine_ops.py --out bench/results/engine_ops --label after

The tiny LLaDA of the tests (``write_tiny_checkpoint(..., "llada", seed=1)``, float32), the default
rule (``low_confidence``, one quota a step) and stop at end-of-text, gen 32, block 8, 16 steps,
for each cache (none, prefix, dual). Every ATen op dispatched outside the model's forward during
the rounds (``Decoding.step``) is counted (``dllm.bench.engine_ops``): kernels (each a launch on a
GPU) and views apart, grouped by the dllm function that issued them. The time outside the
forwards is this thread's CPU time (``time.thread_time``: time the scheduler gave to other
processes is not in it) of a round inside its window (not the first, not one that moves to the
next window), the forward's own taken off by module hooks: the least over the rounds of ``--reps``
decodes, as other processes on a shared machine only ever add to it. Results are appended to OUT.json under ``--label``; OUT.md is
rewritten from all of them.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch

import dllm
from dllm import GenerationConfig
from dllm.bench.engine_ops import EngineOpCounter
from dllm.bench.results_store import cpu_model
from dllm.engine.decoding import Decoding, RowStart
from dllm.models.tiny import write_tiny_checkpoint

CACHES = ("none", "prefix", "dual")
PROMPT = [5, 17, 42, 9, 11, 13, 2, 3]


def rounds(model, config: GenerationConfig) -> Decoding:
    """A decoding made (its first window begun), not yet stepped."""
    return Decoding(model, [RowStart(prefix=PROMPT, gen_length=config.gen_length)], config)


class ForwardCpuTime:
    """``with ForwardCpuTime(model) as f: ...`` then ``f.seconds``: this thread's CPU time inside
    the model's forwards (one intra-op thread: all of their work)."""

    def __init__(self, model) -> None:
        self.model, self.seconds, self._start = model, 0.0, 0.0

    def __enter__(self) -> "ForwardCpuTime":
        self._handles = [self.model.register_forward_pre_hook(self._before),
                         self.model.register_forward_hook(self._after)]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()

    def _before(self, *args) -> None:
        self._start = time.thread_time()

    def _after(self, *args) -> None:
        self.seconds += time.thread_time() - self._start


def measure(model, config: GenerationConfig, reps: int) -> dict:
    decoding = rounds(model, config)
    n = 0
    with EngineOpCounter(model, sites=True) as ops:
        while not decoding.done:
            decoding.step()
            n += 1
    sites: Counter = Counter()
    for (site, kind, name), count in ops.by_site.items():
        sites[f"{kind} {site} {name}"] += count
    outside = []
    for _ in range(reps):
        decoding = rounds(model, config)
        with ForwardCpuTime(model) as forwards:
            first = True
            while not decoding.done:
                window, inside, start = decoding.window, forwards.seconds, time.thread_time()
                decoding.step()
                cpu = time.thread_time() - start - (forwards.seconds - inside)
                if not first and decoding.window == window:
                    outside.append(cpu)
                first = False
    return {"rounds": n, "kernels_per_round": ops.kernels / n, "views_per_round": ops.views / n,
            "outside_ms_in_window": 1e3 * min(outside),
            "by_site": {key: count / n for key, count in sites.most_common()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="output stem (.json and .md)")
    ap.add_argument("--label", required=True, help="name of this run, e.g. before / after")
    ap.add_argument("--reps", type=int, default=15, help="decodes timed per cache (the fastest is kept)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        model = dllm.load(write_tiny_checkpoint(tmp, "llada", seed=1), device="cpu", dtype="float32").model
        results = {}
        for cache in CACHES:
            config = GenerationConfig(gen_length=32, block_length=8, steps=16, cache=cache)
            rounds(model, config).run()  # warm-up
            results[cache] = measure(model, config, args.reps)
            r = results[cache]
            print(f"{cache}: {r['rounds']} rounds; per round {r['kernels_per_round']:.1f} kernels, "
                  f"{r['views_per_round']:.1f} views, {r['outside_ms_in_window']:.3f} ms outside forwards in a window's round", flush=True)
    row = {"label": args.label, "caches": results, "machine": f"{cpu_model()}, 1 thread", "torch": torch.__version__}
    path = args.out.with_suffix(".json")
    rows = json.loads(path.read_text())["rows"] if path.exists() else []
    rows = [r for r in rows if r["label"] != args.label] + [row]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    md = ["Engine ops per decode round outside the forwards: tiny LLaDA, low_confidence, gen 32, block 8, "
          f"16 steps, {row['machine']}, torch {torch.__version__}.", "",
          "| run | cache | kernels / round | views / round | CPU ms outside forwards, a round in its window |", "|---|---|---|---|---|"]
    md += [f"| {r['label']} | {cache} | {c['kernels_per_round']:.1f} | {c['views_per_round']:.1f} | "
           f"{c['outside_ms_in_window']:.3f} |" for r in rows for cache, c in r["caches"].items()]
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
