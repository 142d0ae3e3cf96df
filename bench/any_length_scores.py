"""A bundled model's card scores from `bench/eval_any_length.sh`'s output: scores.json and a table.

    python bench/any_length_scores.py runs/eval/llada --model-dir dllm/assets/models/dllm-waitingline-llada

Reads OUT/{official_0shot, official_1shot, fresh, fresh_gen64, fresh_gen128}/summary.json (the
parts present), writes the model's scores.json (official zero-shot first, as `dllm models`
reads it, then the others) and prints the card's markdown table, one row per part.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

PARTS = {  # folder -> (label, what it measured)
    "official_0shot": ("official files, zero-shot, gen 32", "ParallelBench official test files (whole files, 100 samples per task), zero-shot"),
    "official_1shot": ("official files, one-shot (the benchmark's protocol), gen 32", "the official files, whole, one-shot: each file's own example exchange first"),
    "fresh": ("fresh samples, zero-shot, gen 32", "100 fresh samples per task (dllm bench parallelbench --fresh-samples 100 --fresh-seed 1000000)"),
    "fresh_gen64": ("fresh samples, zero-shot, gen 64", "fresh samples (seed 1000000) on a 64-token answer canvas (--gen-length 64)"),
    "fresh_gen128": ("fresh samples, zero-shot, gen 128", "fresh samples (seed 1000000) on a 128-token answer canvas (--gen-length 128)"),
}
TASK_ORDER = ["copy", "reverse", "sort", "shuffle", "insert_index", "insert_random", "remove_index",
              "remove_random", "replace_index", "replace_random", "latin_square_n4"]


def read_part(folder: Path) -> dict | None:
    path = folder / "summary.json"
    if not path.is_file():
        return None
    (run,) = json.loads(path.read_text())["runs"]
    per_task = {task: entry["score"] for task, entry in run["tasks"].items()}
    samples = {entry["samples"] for entry in run["tasks"].values()}
    return {"mean": run["mean_score"], "per_task": per_task, "samples_per_task": max(samples), "run": run["run"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("eval_dir", type=Path)
    ap.add_argument("--model-dir", type=Path, default=None, help="write its scores.json")
    ap.add_argument("--decoding", default="low_confidence, 1 token per step, one block",
                    help="how the runs decoded, as scores.json states it")
    ap.add_argument("--source", default="bash bench/eval_any_length.sh",
                    help="the command that wrote the runs, as scores.json states it")
    args = ap.parse_args()
    parts = {name: read_part(args.eval_dir / name) for name in PARTS}
    parts = {name: part for name, part in parts.items() if part is not None}
    header = "| scores | mean | " + " | ".join(t.replace("_n4", "").replace("_", " ") for t in TASK_ORDER) + " |"
    print(header)
    print("|" + "---|" * (len(TASK_ORDER) + 2))
    for name, part in parts.items():
        by_short = {task.split("/")[1]: score for task, score in part["per_task"].items()}
        cells = [f"{100 * by_short[t]:.0f}" if t in by_short else "" for t in TASK_ORDER]
        print(f"| {PARTS[name][0]} ({part['samples_per_task']} per task) | **{100 * part['mean']:.1f}** | " + " | ".join(cells) + " |")
    if args.model_dir and "official_0shot" in parts:
        first = parts["official_0shot"]
        scores = {"benchmark": PARTS["official_0shot"][1], "protocol": "zero-shot",
                  "decoding": args.decoding, "mean": first["mean"],
                  "per_task": first["per_task"], "source": f"{args.source} (official_0shot)"}
        for name, part in parts.items():
            if name != "official_0shot":
                scores["fresh_samples" if name == "fresh" else name] = {"benchmark": PARTS[name][1], "mean": part["mean"], "per_task": part["per_task"],
                                "samples_per_task": part["samples_per_task"]}
        (args.model_dir / "scores.json").write_text(json.dumps(scores, indent=2) + "\n")


if __name__ == "__main__":
    main()
