"""The seed papers' methods side by side on ParallelBench (issue 42, item 5), in one run: every
run of ``bench/runs/seed_methods.json`` (stepwise, threshold 0.9, FreeDave, SSD, APD at three R,
guided diffusion, entropy_threshold at three tau) on every model given, each model loaded once
with the bundled autoregressive helper (APD and guided need it; every bundled model shares its
tokenizer). A run a model refuses (a strategy that does not apply to its layout) is recorded
with the refusal's message, not dropped. A ``--distilled`` model (the certainty-forced one) runs
only its inference rule's runs (``--distilled-runs``), against its base's full row. Per (model, run): score, tokens per forward, forwards
per answer and wall seconds per answer (batch ``--batch-size``; the machine is named in the
output). Each model's per-sample results go to ``OUT/<model>/`` (the ``dllm bench
parallelbench`` store, resumable); the table to ``OUT/table.json``.

    .venv/bin/python bench/seed_methods.py --limit 5 --out bench/results/seed_methods \
        --models dllm-waitingline-llada dllm-waitingline-dream ... --distilled dllm-waitingline-llada-cf
"""
from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch

import dllm
from dllm.bench.parallelbench import OFFLINE_TASKS, Run, plan_parallelbench, run_parallelbench
from dllm.bench.parallelbench_cli import declared_shots
from dllm.data.prompts import build_messages, default_data_dir
from dllm.models.bundled import bundled_models, resolve_model_path

HELPER = "dllm-waitingline-ar"


def refusal(model, plans) -> str | None:
    """The model's refusal of the run (its message), from one sample decoded: a strategy that
    does not apply to a layout says so when it meets the model, not when the config is built."""
    plan = plans[0]
    try:
        model.generate_ids([model.encode(build_messages(plan.spec, plan.samples[0], plan.shots))], plan.config)
    except ValueError as err:
        return str(err)
    return None


def machine() -> str:
    return (f"{platform.machine()} CPU, {torch.get_num_threads()} thread(s), torch {torch.__version__}"
            if not torch.cuda.is_available() else torch.cuda.get_device_name())


def bench_model(name: str, runs: list[Run], args) -> list[dict]:
    model = dllm.load(name, helper=HELPER)
    # as `dllm bench parallelbench`: --shots, else the prompts the model declares, else the benchmark's
    shots = args.shots if args.shots is not None else declared_shots(resolve_model_path(name))
    rows, kept = [], []
    for run in runs:
        plans = plan_parallelbench(args.data, [run], tasks=args.tasks, shots=shots, limit=args.limit,
                                   batch_size=args.batch_size)
        reason = refusal(model, plans)
        if reason is None:
            kept.append(run)
        else:
            rows.append({"model": name, "run": run.name, "line": run.line, "refused": reason})
    out = args.out / Path(name).name
    summary = run_parallelbench(model, args.data, kept, tasks=args.tasks, shots=shots, limit=args.limit,
                                batch_size=args.batch_size, out_dir=out)
    for entry in summary["runs"]:
        tasks = entry["tasks"].values()
        seconds = sum(t["seconds"] for t in tasks)
        rows.append({"model": name, "run": entry["run"], "line": entry["line"], "score": 100 * entry["mean_score"],
                     "tpf": entry["tpf"], "nfe": entry["nfe"], "samples": entry["samples"],
                     "seconds_per_answer": seconds / entry["samples"], "shots": entry["shots"],
                     "per_task": {t["task"]: 100 * t["score"] for t in tasks}})
    order = {r.name: i for i, r in enumerate(runs)}
    return sorted(rows, key=lambda r: order[r["run"]])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=Path, default=Path(__file__).parent / "runs" / "seed_methods.json")
    ap.add_argument("--models", nargs="*", default=sorted(bundled_models()), help="default: every bundled model")
    ap.add_argument("--distilled", nargs="*", default=[],
                    help="models run under --distilled-runs only (a certainty-forced model: its inference rule "
                         "against its base's, which --models runs in full)")
    ap.add_argument("--distilled-runs", nargs="+", default=["threshold0.9", "entropy0.2", "entropy0.5", "entropy1.0"])
    ap.add_argument("--data", type=Path, default=None, help="ParallelBench data (default: the project's default)")
    ap.add_argument("--tasks", nargs="+", default=list(OFFLINE_TASKS))
    ap.add_argument("--limit", type=int, default=None, help="samples per task, stratified (default: whole files)")
    ap.add_argument("--shots", type=int, default=None, help="default: the benchmark's protocol (one-shot)")
    ap.add_argument("--batch-size", type=int, default=10)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.data = args.data or default_data_dir()
    runs = [Run(**r) for r in json.loads(args.runs.read_text())]
    unknown = sorted(set(args.distilled_runs) - {r.name for r in runs})
    if unknown:
        ap.error(f"--distilled-runs {unknown}: not in {args.runs} (its runs: {[r.name for r in runs]})")
    args.out.mkdir(parents=True, exist_ok=True)
    table = {"machine": machine(), "batch_size": args.batch_size,
             "samples": "whole official files" if args.limit is None else f"{args.limit} per task, stratified",
             "shots": ("the benchmark's protocol (one-shot) unless a model declares dllm_prompt_shots"
                       if args.shots is None else args.shots), "rows": []}
    plan = [(name, runs) for name in args.models]
    plan += [(name, [r for r in runs if r.name in args.distilled_runs]) for name in args.distilled]
    for name, model_runs in plan:
        table["rows"] += bench_model(name, model_runs, args)
        (args.out / "table.json").write_text(json.dumps(table, indent=1) + "\n")
    (args.out / "table.md").write_text(markdown(table))
    print(markdown(table))


def markdown(table: dict) -> str:
    """The table as docs/BENCHMARKS.md shows it: one row per (model, run)."""
    lines = [f"_ParallelBench official files, {table['samples']}, shots: {table['shots']}, batch {table['batch_size']}, "
             f"{table['machine']}_", "",
             "| model | run | score | tokens per forward | forwards per answer | seconds per answer |",
             "|---|---|---|---|---|---|"]
    for r in table["rows"]:
        if "refused" in r:
            lines.append(f"| {r['model']} | {r['run']} | refused: {r['refused']} | | | |")
        else:
            lines.append(f"| {r['model']} | {r['run']} | {r['score']:.1f} | {r['tpf']:.2f} | {r['nfe']:.1f} | "
                         f"{r['seconds_per_answer']:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
