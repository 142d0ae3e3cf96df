"""Markdown table of a `dllm bench parallelbench` run (its summary.json), for docs/BENCHMARKS.md.

    python bench/pb_table.py bench/results/pb_topk/summary.json --reference low_confidence_k=1

A first line names the protocol (samples per task, whole files or a stratified subset, shots).
One row per run: mean score over the tasks, per-task scores, NFE, TPF, draft rows per forward,
tokens/s (this machine, same process), speedup in tokens/s and QPS_4 against the reference run.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("summary", type=Path)
    ap.add_argument("--reference", default=None, help="run name for speedup and QPS (default: the first run)")
    args = ap.parse_args()
    print(table(json.loads(args.summary.read_text()), args.reference), end="")


if __name__ == "__main__":
    main()
