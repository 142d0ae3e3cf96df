"""Score against speed and compute for cache sweeps: a markdown table and a two-panel plot.

    python bench/cache_pareto.py bench/results/pb_adaptive_cache/summary.json

Runs are grouped by their line (one rule) and named ``<rule>_<cache>``; each row compares a run
with its line's ``<rule>_none`` run: tokens/s (all of the run's tasks, this machine) and mean
token-forwards per sample. Writes ``cache_pareto.md`` and ``cache_pareto.png`` beside the summary.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from pb_table import run_rate

from dllm.bench.plots import describe


def token_forwards(entry: dict) -> float:
    """Mean token-forwards per sample over the run's tasks."""
    tasks = entry["tasks"].values()
    return sum(t["token_forwards"] * t["samples"] for t in tasks) / sum(t["samples"] for t in tasks)


def finished(summary: dict) -> list[dict]:
    tasks = {t for e in summary["runs"] for t in e["tasks"]}
    return [e for e in summary["runs"] if set(e["tasks"]) == tasks and e.get("mean_score") is not None]


def table(summary: dict) -> str:
    lines = [f"_{describe(summary)}_", "",
             "| rule | cache | mean % | tok/s | speedup | token-forwards / sample | compute vs none | NFE |",
             "|---|---|---|---|---|---|---|---|"]
    entries = finished(summary)
    for line in dict.fromkeys(e["line"] for e in entries):
        runs = [e for e in entries if e["line"] == line]
        base = next((e for e in runs if e["run"].endswith("_none")), runs[0])
        for e in runs:
            cache = e["run"].split("_", 1)[1] if "_" in e["run"] else e["run"]
            lines.append(f"| {line} | {cache} | {100 * e['mean_score']:.1f} | {run_rate(e):.0f} | "
                         f"{run_rate(e) / run_rate(base):.2f}x | {token_forwards(e):.0f} | "
                         f"{token_forwards(e) / token_forwards(base):.2f} | {e['nfe']:.1f} |")
    return "\n".join(lines) + "\n"


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = finished(summary)
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.2), sharey=True)
    palette, markers = plt.get_cmap("tab10").colors, "osD^v<>"
    for i, line in enumerate(dict.fromkeys(e["line"] for e in entries)):
        runs = [e for e in entries if e["line"] == line]
        for ax, x in zip(axes, (run_rate, token_forwards)):
            ax.scatter([x(e) for e in runs], [100 * e["mean_score"] for e in runs], color=palette[i],
                       marker=markers[i % len(markers)], label=line, zorder=3)
            for e in runs:
                ax.annotate(e["run"].split("_", 1)[1], (x(e), 100 * e["mean_score"]), fontsize=7,
                            color=palette[i], textcoords="offset points", xytext=(4, 3))
    axes[0].set_xlabel("tokens/s (CPU, shared machine)")
    axes[1].set_xlabel("token-forwards per sample (compute)")
    axes[0].set_ylabel("mean ParallelBench score (%)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"KV-cache modes: score against speed and compute ({describe(summary)})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("summary", type=Path)
    args = ap.parse_args()
    summary = json.loads(args.summary.read_text())
    (args.summary.parent / "cache_pareto.md").write_text(table(summary))
    plot(summary, args.summary.parent / "cache_pareto.png")
    print(table(summary), end="")


if __name__ == "__main__":
    main()
