"""APD's two K/V options side by side (issue 42): ``helper_cache`` (the helper's transformers cache
of the committed prefix; must give the same tokens) and ``kv_window`` (the diffusion model's K/V
window; an approximation), against plain APD on a bundled model with the bundled helper, over
ParallelBench prompts (``--limit`` stratified samples per task). Every variant decodes the same
batches in turn, repeated ``--repeats`` times, so the time ratios come from one run; tokens are
compared with plain APD's.

    OMP_NUM_THREADS=1 .venv/bin/python bench/apd_caches.py --limit 2 --out bench/results/apd_caches.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import time
from pathlib import Path

import torch

import dllm
from dllm.bench.parallelbench import OFFLINE_TASKS, Run, plan_parallelbench
from dllm.data.prompts import build_messages, default_data_dir
from dllm.engine.decoding import decode

VARIANTS = {"plain": {}, "helper_cache": {"helper_cache": True}, "kv_window_16": {"kv_window": 16},
            "kv_window_16+helper_cache": {"kv_window": 16, "helper_cache": True}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="dllm-waitingline-dream")
    ap.add_argument("--helper", default="dllm-waitingline-ar")
    ap.add_argument("--mixture-weight", type=float, default=0.7)
    ap.add_argument("--limit", type=int, default=2, help="samples per task, stratified")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    model = dllm.load(args.model, helper=args.helper)
    run = Run(name="apd", line="APD", options={"strategy": "apd",
                                               "strategy_args": {"mixture_weight": args.mixture_weight}})
    plans = plan_parallelbench(default_data_dir(), [run], tasks=list(OFFLINE_TASKS), shots=None, limit=args.limit,
                               batch_size=args.batch_size)
    batches = []  # (config, prompt ids) per batch
    for plan in plans:
        prompts = [model.encode(build_messages(plan.spec, s, plan.shots)) for s in plan.samples]
        batches += [(plan.config, prompts[i : i + args.batch_size]) for i in range(0, len(prompts), args.batch_size)]
    seconds = {name: 0.0 for name in VARIANTS}
    answers: dict[str, list] = {name: [] for name in VARIANTS}
    forwards = {name: 0 for name in VARIANTS}
    for repeat in range(args.repeats):
        for config, prompts in batches:
            for name, extra in VARIANTS.items():
                cfg = dataclasses.replace(config, strategy_args={**config.strategy_args, **extra})
                start = time.perf_counter()
                out = decode(model.model, prompts, cfg)
                seconds[name] += time.perf_counter() - start
                if repeat == 0:
                    answers[name] += [row.tolist() for row in out.answer]
                    forwards[name] += int(out.nfe.sum())
    table = {"machine": f"{platform.machine()} CPU, {torch.get_num_threads()} thread(s), torch {torch.__version__}",
             "model": args.model, "helper": args.helper, "mixture_weight": args.mixture_weight,
             "prompts": len(answers["plain"]), "samples": f"{args.limit} per task, stratified",
             "repeats": args.repeats, "rows": []}
    for name in VARIANTS:
        same = sum(a == b for a, b in zip(answers[name], answers["plain"]))
        table["rows"].append({"variant": name, "seconds": round(seconds[name], 2),
                              "time_vs_plain": round(seconds[name] / seconds["plain"], 3),
                              "forwards": forwards[name], "answers_equal_to_plain": same})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(table, indent=1) + "\n")
    print(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
