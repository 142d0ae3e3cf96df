"""Structured output on ParallelBench's waiting-line tasks: every answer is a JSON list of names,
so each sample is decoded free and constrained by {"type": "array", "items": {"type": "string"}}
side by side (same prompts, same decoding), at one and at several tokens per step. Prints and
writes: share of answers that are JSON lists of strings (jsonschema decides), the benchmark's
score, forwards, tokens per forward (the answer's tokens over its forwards), wall time, and the constraint's own time per batch step (mask + commit
filter), for each bundled model (``--models``). Both modes decode with max_tokens = the task's
length, one block. ``--strategy apd|guided --helper dllm-waitingline-ar`` measures a
helper-verified strategy instead (tokens per step do not apply: one row per model).

    .venv/bin/python bench/structured_waiting_line.py --limit 20 --tokens-per-step 1 4 8 \
        --out bench/results/structured/waiting_line.json
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import dllm
from dllm.bench.metrics import score
from dllm.bench.parallelbench import OFFLINE_TASKS, select_samples
from dllm.data.prompts import build_messages, load_samples, load_task_configs
from dllm.models.bundled import bundled_models
from dllm.samplers.constraints import json_answer_errors
from dllm.samplers.constraints.rows import CanvasConstraints

SCHEMA = {"type": "array", "items": {"type": "string"}}
MODES = ("free", "json_schema")


def _timed(cls, name: str, clock: dict) -> None:
    """Add the seconds spent in ``cls.name`` to ``clock[name]`` and count its calls."""
    inner = getattr(cls, name)

    def wrapper(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(self, *args, **kwargs)
        finally:
            clock[name] = clock.get(name, 0.0) + time.perf_counter() - start
            clock[name + "_calls"] = clock.get(name + "_calls", 0) + 1

    setattr(cls, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/parallelbench"))
    parser.add_argument("--limit", type=int, default=20, help="samples per task (stratified)")
    parser.add_argument("--tokens-per-step", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--models", nargs="+", default=sorted(bundled_models()), help="default: every bundled model")
    parser.add_argument("--strategy", default="plain", help="plain, or a helper-verified apd / guided")
    parser.add_argument("--strategy-args", type=json.loads, default={}, help='JSON, e.g. \'{"mixture_weight": 0.7}\'')
    parser.add_argument("--helper", default=None, help="the autoregressive helper apd / guided verify with")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.strategy != "plain":
        args.tokens_per_step = [None]  # the strategy decides how many tokens a forward commits
    specs = load_task_configs(args.data)
    tasks = [t for t in OFFLINE_TASKS if t.startswith("waiting_line/")]
    clock: dict = {}
    _timed(CanvasConstraints, "mask_logits", clock)
    _timed(CanvasConstraints, "filter_commit", clock)
    _timed(CanvasConstraints, "allowed_ids", clock)  # apd / guided: the verifier's constrained choice
    rows = []
    for name in args.models:
        rows += _measure(dllm.load(name, helper=args.helper), name, args, specs, tasks, clock)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"models": args.models, "tasks": tasks, "limit": args.limit,
                                        "strategy": args.strategy, "strategy_args": args.strategy_args,
                                        "helper": args.helper, "schema": SCHEMA, "rows": rows}, indent=1) + "\n")


def _measure(lm, name: str, args, specs: dict, tasks: list[str], clock: dict) -> list[dict]:
    """One model's rows: each tokens-per-step, free and constrained."""
    rows = []
    for tps in args.tokens_per_step:
        # the two modes decode each batch back to back, so a busy machine slows both alike
        totals = {mode: dict(samples=0, parsed=0, score=0.0, nfe=0, tpf=0.0, seconds=0.0, constraint=0.0, steps=0)
                  for mode in MODES}
        for task in tasks:
            spec = specs[task]
            samples = load_samples(args.data, task)
            picked = [samples[i] for i in select_samples(samples, args.limit)[0]]
            gen = spec.max_tokens
            for start in range(0, len(picked), args.batch_size):
                batch = picked[start : start + args.batch_size]
                ids = [lm.encode(build_messages(spec, s, 0)) for s in batch]
                for mode in MODES:
                    options = dict(max_tokens=gen, block_length=gen, strategy=args.strategy,
                                   strategy_args=args.strategy_args)
                    if tps is not None:
                        options["steps"] = gen // tps
                    if mode == "json_schema":
                        options["json_schema"] = SCHEMA
                    clock.clear()
                    began = time.perf_counter()
                    out = lm.generate_ids(ids, **options)
                    total = totals[mode]
                    total["seconds"] += time.perf_counter() - began
                    total["constraint"] += sum(clock.get(part, 0.0) for part in ("mask_logits", "filter_commit",
                                                                                   "allowed_ids"))
                    total["steps"] += clock.get("mask_logits_calls", 0)
                    for sample, text, stats in zip(batch, out.texts, out.stats):
                        total["samples"] += 1
                        total["parsed"] += json_answer_errors(text, SCHEMA) is None
                        total["score"] += score(spec.metric, text, sample) or 0.0
                        total["nfe"] += stats["nfe"]
                        total["tpf"] += stats["tpf"]
        for mode in MODES:
            total = totals[mode]
            n = total["samples"]
            row = {"model": name, "strategy": args.strategy, "tokens_per_step": tps, "mode": mode, "samples": n,
                   "parsed": total["parsed"] / n,
                   "score": round(total["score"] / n, 4), "nfe": total["nfe"] / n,
                   "tokens_per_forward": round(total["tpf"] / n, 3),
                   "seconds": round(total["seconds"], 2),
                   "constraint_seconds": round(total["constraint"], 2),
                   "constraint_ms_per_step": round(1000 * total["constraint"] / total["steps"], 2) if total["steps"] else None,
                   "batch_steps": total["steps"]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


if __name__ == "__main__":
    main()
