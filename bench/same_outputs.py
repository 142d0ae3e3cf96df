"""Check that lossless runs of a `dllm bench parallelbench` folder wrote their reference run's
outputs, sample by sample, and print forwards per answer and tokens per forward side by side.

    python bench/same_outputs.py bench/results/pb_ssd_llada --reference topk1

Each (run, task) pair's per-sample records (prompt, output) are compared with the reference's;
a lossless strategy (FreeDave, SSD) around the reference's rule must give the same text for
every prompt. Exit status 1 names the first sample that differs.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dllm.bench.results_store import read_samples


def compare(out_dir: Path, reference: str) -> list[dict]:
    """One row per run: samples compared, samples equal, forwards per answer (mean NFE), answer
    tokens per forward (pooled, as the summary's TPF) and the reference's forwards over the run's."""
    summary = json.loads((out_dir / "summary.json").read_text())
    pairs: dict[str, list[str]] = {}
    for row in summary["rows"]:
        pairs.setdefault(row["run"], []).append(row["task"])
    if reference not in pairs:
        raise SystemExit(f"no run {reference!r} in {out_dir}; runs: {sorted(pairs)}")
    rows = []
    for run, tasks in pairs.items():
        compared = equal = 0
        nfe = tokens = 0
        for task in tasks:
            base = {json.dumps(r["prompt"]): r["output"] for r in read_samples(out_dir, reference, task)}
            for record in read_samples(out_dir, run, task):
                compared += 1
                equal += base.get(json.dumps(record["prompt"])) == record["output"]
                nfe += record["nfe"]
                tokens += record["tokens"]
        rows.append({"run": run, "samples": compared, "equal": equal, "nfe": nfe / compared, "tpf": tokens / max(nfe, 1)})
    ref = next(r for r in rows if r["run"] == reference)["nfe"]
    for r in rows:
        r["fewer"] = ref / r["nfe"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="a dllm bench parallelbench --out folder")
    parser.add_argument("--reference", default="topk1", help="the run every other run must equal (default: topk1)")
    args = parser.parse_args()
    rows = compare(args.out_dir, args.reference)
    print(f"| run | samples | outputs equal to {args.reference}'s | forwards per answer (NFE) | tokens per forward (TPF) | fewer forwards |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['run']} | {r['samples']} | {r['equal']} | {r['nfe']:.1f} | {r['tpf']:.2f} | {r['fewer']:.2f}x |")
    if any(r["equal"] != r["samples"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
