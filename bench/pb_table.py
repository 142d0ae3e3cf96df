"""Markdown table of a `dllm bench parallelbench` run (its summary.json), for docs/BENCHMARKS.md.

    python bench/pb_table.py bench/results/pb_topk/summary.json --reference low_confidence_k=1
    python bench/pb_table.py bench/results/pb_bd_policies/summary.json --by-cache --reference topk1+none
    python bench/pb_table.py bench/results/pb_bd_fresh/summary.json --official \
        bench/results/pb_bd_topk_zeroshot/summary.json --run low_confidence_k=1

A first line names the protocol (samples per task, whole files or a stratified subset, shots).
One row per run: mean score over the tasks, per-task scores, NFE, TPF, draft rows per forward,
tokens/s (this machine, same process), speedup in tokens/s and QPS_4 against the reference run.
``--by-cache``: one row per (policy, cache) with the mean score, NFE, TPF, tokens/s and speedup
only (for grids of every policy under every cache). ``--official``: one run's per-task scores on
fresh samples next to the official files and their difference.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from dllm.bench.parallelbench import qps, summarize
from dllm.bench.plots import describe


def short(task: str) -> str:
    name = task.split("/")[1]
    return {"latin_square_n4": "latin", "insert_index": "ins_i", "insert_random": "ins_r",
            "remove_index": "rem_i", "remove_random": "rem_r", "replace_index": "rep_i",
            "replace_random": "rep_r", "sudoku_n4_12": "sudoku"}.get(name, name)


def run_rate(entry: dict) -> float:
    """Generated tokens per second over all of the run's tasks."""
    tasks = entry["tasks"].values()
    tokens = sum(t["tpf"] * t["nfe"] * t["samples"] for t in tasks)
    seconds = sum(t["seconds"] for t in tasks)
    return tokens / seconds if seconds else 0.0


def pct(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{100 * value:.{digits}f}"


def table(summary: dict, reference: str | None) -> str:
    """The markdown table; runs that have not finished every task (a sweep still going or
    interrupted) are listed under it, not averaged over fewer tasks."""
    tasks = list(dict.fromkeys(t for e in summary["runs"] for t in e["tasks"]))
    runs = [e for e in summary["runs"] if set(e["tasks"]) == set(tasks)]
    unfinished = [e["run"] for e in summary["runs"] if e not in runs]
    ref = next((e for e in runs if e["run"] == reference), runs[0])
    ref_rate, ref_score = run_rate(ref), ref["mean_score"]
    head = ["run", "mean %", *map(short, tasks), "NFE", "TPF", "rows/fwd", "tok/s", "speedup", "QPS_4"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for e in runs:
        rows = sum(t["draft_rows"] * t["samples"] for t in e["tasks"].values())
        nfe = sum(t["nfe"] * t["samples"] for t in e["tasks"].values())
        speed = run_rate(e) / ref_rate if ref_rate else 0.0
        cells = [e["run"], pct(e["mean_score"], 1), *(pct(e["tasks"][t]["score"], 0) for t in tasks),
                 f"{e['nfe']:.1f}", f"{e['tpf']:.2f}", f"{rows / nfe:.2f}" if nfe else "-",
                 f"{run_rate(e):.0f}", f"{speed:.2f}x",
                 f"{qps(speed, e['mean_score'], ref_score):.2f}" if ref_score and e["mean_score"] is not None else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    if unfinished:
        lines += ["", f"Not finished (left out): {', '.join(unfinished)}."]
    finished_pb = summarize([t for e in runs for t in e["tasks"].values()])["pb"]  # PBx over finished runs only
    pb = [f"| {line} | " + " | ".join(f"{v:.2f}" for v in values.values()) + " |" for line, values in finished_pb.items()]
    return "\n".join([f"_{describe(summary)}_", ""] + lines + ["", "| line | PB80 | PB75 | PB70 |", "|---|---|---|---|", *pb]) + "\n"


def cache_label(config: dict) -> str:
    """none, prefix, dual, or dual+sub4 for the dual cache over 4-token sub-blocks."""
    sub = config.get("sub_block_length")
    return config.get("cache", "none") + (f"+sub{sub}" if sub else "")


def by_cache_table(summary: dict, reference: str | None) -> str:
    """One row per (policy, cache): mean score, NFE, TPF, tokens/s and speedup over ``reference``."""
    tasks = list(dict.fromkeys(t for e in summary["runs"] for t in e["tasks"]))
    runs = [e for e in summary["runs"] if set(e["tasks"]) == set(tasks)]
    unfinished = [e["run"] for e in summary["runs"] if e not in runs]
    ref = next((e for e in runs if e["run"] == reference), runs[0])
    lines = ["| policy | cache | mean % | NFE | TPF | tok/s | speedup |", "|---|---|---|---|---|---|---|"]
    for e in runs:
        cache = cache_label(next(iter(e["tasks"].values()))["config"])
        policy = e["run"].removesuffix("+" + cache)  # bench/policy_grid.py names runs <policy>+<cache>
        speed = run_rate(e) / run_rate(ref) if run_rate(ref) else 0.0
        lines.append(f"| {policy} | {cache} | {pct(e['mean_score'], 1)} | {e['nfe']:.1f} | {e['tpf']:.2f} | "
                     f"{run_rate(e):.0f} | {speed:.2f}x |")
    if unfinished:
        lines += ["", f"Not finished (left out): {', '.join(unfinished)}."]
    return "\n".join([f"_{describe(summary)}; speedup over {ref['run']}_", ""] + lines) + "\n"


def fresh_table(fresh: dict, official: dict, run: str) -> str:
    """``run``'s per-task scores on the official files, on fresh samples, and fresh - official."""
    rows = {}
    for name, summary in (("official files", official), ("fresh samples", fresh)):
        entry = next((e for e in summarize(summary["rows"])["runs"] if e["run"] == run), None)
        if entry is None:
            raise SystemExit(f"run {run!r} is not in the {name} summary")
        rows[name] = entry
    tasks = [t for t in rows["official files"]["tasks"] if t in rows["fresh samples"]["tasks"]]
    mean = {k: sum(e["tasks"][t]["score"] for t in tasks) / len(tasks) for k, e in rows.items()}
    head = ["samples", "mean %", *map(short, tasks)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, e in rows.items():
        n = sorted({e["tasks"][t]["samples"] for t in tasks})
        source = next(iter({e["tasks"][t].get("source", "") for t in tasks}))
        label = f"{name} ({'/'.join(map(str, n))} per task{', ' + source if source else ''})"
        lines.append("| " + " | ".join([label, pct(mean[name], 1), *(pct(e["tasks"][t]["score"], 0) for t in tasks)]) + " |")
    diff = [100 * (rows["fresh samples"]["tasks"][t]["score"] - rows["official files"]["tasks"][t]["score"]) for t in tasks]
    lines.append("| " + " | ".join(["fresh - official (points)", f"{100 * (mean['fresh samples'] - mean['official files']):+.1f}",
                                      *(f"{d:+.0f}" for d in diff)]) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("summary", type=Path)
    ap.add_argument("--reference", default=None, help="run name for speedup and QPS (default: the first run)")
    ap.add_argument("--by-cache", action="store_true", help="one short row per (policy, cache)")
    ap.add_argument("--official", type=Path, default=None,
                    help="summary.json of the official files: compare --run on fresh samples (SUMMARY) with it")
    ap.add_argument("--run", default="low_confidence_k=1", help="the run compared by --official")
    args = ap.parse_args()
    summary = json.loads(args.summary.read_text())
    if args.official:
        print(fresh_table(summary, json.loads(args.official.read_text()), args.run), end="")
    elif args.by_cache:
        print(by_cache_table(summary, args.reference), end="")
    else:
        print(table(summary, args.reference), end="")


if __name__ == "__main__":
    main()
