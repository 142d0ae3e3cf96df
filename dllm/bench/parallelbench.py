"""ParallelBench evaluation: official prompts and metrics, any policy, quality against speed.

Reads the official JSONL + task_config.yaml files from a data directory (never shipped with
dllm), builds prompts exactly as the benchmark does (template, optional one-shot turns, chat
template), decodes each task with every configured run, scores with the benchmark's metric
definitions (reimplemented in dllm.bench.metrics) and writes per-sample JSONL, a summary
(JSON + CSV), PBx values and a Pareto plot.
"""
from __future__ import annotations

import csv
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from dllm.api import DiffusionLM
from dllm.bench.metrics import score
from dllm.config import GenerationConfig
from dllm.data.prompts import build_messages, load_samples, load_task_configs

OFFLINE_TASKS = (
    "waiting_line/copy", "waiting_line/reverse", "waiting_line/sort", "waiting_line/shuffle",
    "waiting_line/insert_index", "waiting_line/insert_random", "waiting_line/remove_index",
    "waiting_line/remove_random", "waiting_line/replace_index", "waiting_line/replace_random",
    "puzzle/latin_square_n4", "puzzle/sudoku_n4_12",
)
PB_LEVELS = (80, 75, 70)


@dataclass(kw_only=True, slots=True)
class Run:
    """One decoding configuration. ``line`` groups runs into one curve (e.g. top-k at k=1..8);
    ``tokens_per_step`` sets steps = gen_length / tokens_per_step for each task."""

    name: str
    line: str
    options: dict[str, Any] = field(default_factory=dict)
    tokens_per_step: int | None = None

    def config(self, gen_length: int) -> GenerationConfig:
        options = dict(self.options)
        if self.tokens_per_step is not None:
            if gen_length % self.tokens_per_step:
                raise ValueError(f"run {self.name}: tokens_per_step {self.tokens_per_step} does not divide gen_length {gen_length}")
            options["steps"] = gen_length // self.tokens_per_step
        options.setdefault("block_length", gen_length)
        return GenerationConfig(gen_length=gen_length, **options)


def evaluate_task(model: DiffusionLM, data_dir: Path, task: str, run: Run, *, shots: int,
                  limit: int | None, batch_size: int, out_dir: Path) -> dict[str, Any]:
    spec = load_task_configs(data_dir)[task]
    samples = load_samples(data_dir, task)[:limit]
    config = run.config(spec.max_tokens)
    records, seconds = [], 0.0
    for start in tqdm(range(0, len(samples), batch_size), desc=f"{run.name} {task}", leave=False):
        batch = samples[start : start + batch_size]
        messages = [build_messages(spec, s, shots) for s in batch]
        ids = [model.encode(m) for m in messages]
        out = model.generate_ids(ids, config)
        seconds += out.stats[0]["seconds"]
        for sample, msg, text, st, order in zip(batch, messages, out.texts, out.stats, out.decode_order):
            records.append({"prompt": msg, "output": text, "label": sample["answer"],
                            "score": score(spec.metric, text, sample), "nfe": st["nfe"], "tpf": st["tpf"],
                            "tokens": st["tokens"], "draft_rows": st["draft_rows"],
                            "token_forwards": st["token_forwards"], "decode_order": order})
    path = out_dir / "samples" / run.name / f"{task.replace('/', '__')}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    scored = [r["score"] for r in records if r["score"] is not None]
    n = len(records)
    return {
        "run": run.name, "line": run.line, "task": task, "samples": n,
        "score": sum(scored) / len(scored) if scored else None,
        "nfe": sum(r["nfe"] for r in records) / n,
        "tpf": sum(r["tokens"] for r in records) / max(sum(r["nfe"] for r in records), 1),
        "draft_rows": sum(r["draft_rows"] for r in records) / n,
        "token_forwards": sum(r["token_forwards"] for r in records) / n,
        "tokens_per_s": sum(r["tokens"] for r in records) / seconds if seconds else None,
        "seconds": seconds, "config": _config_dict(config),
    }


def _config_dict(config: GenerationConfig) -> dict[str, Any]:
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean over tasks per run, PBx per line, and QPS (gamma 4) against each line's first run."""
    runs: dict[str, dict[str, Any]] = {}
    for r in rows:
        entry = runs.setdefault(r["run"], {"run": r["run"], "line": r["line"], "tasks": {}})
        entry["tasks"][r["task"]] = r
    for entry in runs.values():
        tasks = [t for t in entry["tasks"].values() if t["score"] is not None]
        entry["mean_score"] = sum(t["score"] for t in tasks) / len(tasks) if tasks else None
        nfe = sum(t["nfe"] * t["samples"] for t in tasks)
        tokens = sum(t["tpf"] * t["nfe"] * t["samples"] for t in tasks)
        entry["tpf"] = tokens / nfe if nfe else None
        entry["nfe"] = nfe / max(sum(t["samples"] for t in tasks), 1)
    lines: dict[str, list[dict[str, Any]]] = {}
    for entry in runs.values():
        lines.setdefault(entry["line"], []).append(entry)
    pb = {line: {f"PB{x}": max((e["tpf"] for e in es if e["mean_score"] is not None and 100 * e["mean_score"] >= x), default=0.0)
                 for x in PB_LEVELS} for line, es in lines.items()}
    return {"runs": list(runs.values()), "pb": pb}


def qps(speedup: float, score_: float, baseline: float, gamma: float = 4.0) -> float:
    """QPS_gamma = speedup * (score / baseline)^gamma (SchED)."""
    return speedup * (score_ / baseline) ** gamma if baseline else 0.0


def write_outputs(rows: list[dict[str, Any]], summary: dict[str, Any], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps({"rows": rows, **summary}, indent=1, default=str) + "\n")
    with (out_dir / "summary.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "line", "task", "samples", "score", "nfe", "tpf", "draft_rows", "tokens_per_s"])
        for r in rows:
            w.writerow([r["run"], r["line"], r["task"], r["samples"], r["score"], f"{r['nfe']:.2f}",
                        f"{r['tpf']:.3f}", f"{r['draft_rows']:.2f}", r["tokens_per_s"]])
    plot_pareto(summary, out_dir / "pareto.png")


def plot_pareto(summary: dict[str, Any], path: Path) -> None:
    """Mean score against TPF, one line per policy line (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines: dict[str, list[tuple[float, float]]] = {}
    for e in summary["runs"]:
        if e["mean_score"] is not None:
            lines.setdefault(e["line"], []).append((e["tpf"], 100 * e["mean_score"]))
    fig, ax = plt.subplots(figsize=(9, 4.8))
    colors = plt.get_cmap("tab20").colors
    for i, (line, pts) in enumerate(sorted(lines.items())):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="osD^v<>"[i % 7], color=colors[i % 20],
                linestyle="--" if i % 2 else "-", label=line)
    ax.set_xlabel("tokens per forward (TPF)")
    ax.set_ylabel("mean ParallelBench score (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_parallelbench(model: DiffusionLM, data_dir: Path, runs: list[Run], *, tasks: list[str],
                      shots: int, limit: int | None, batch_size: int, out_dir: Path) -> dict[str, Any]:
    """Evaluate every run on every task; write and return the summary."""
    if not data_dir.is_dir():
        raise FileNotFoundError(f"ParallelBench data directory {data_dir} not found; pass --data DIR")
    known = load_task_configs(data_dir)
    unknown = sorted(set(tasks) - set(known))
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; known: {sorted(known)}")
    for run in runs:  # validate every config before any model work
        for task in tasks:
            run.config(known[task].max_tokens)
    rows = [evaluate_task(model, data_dir, task, run, shots=shots, limit=limit, batch_size=batch_size, out_dir=out_dir)
            for run in tqdm(runs, desc="runs") for task in tasks]
    summary = summarize(rows)
    write_outputs(rows, summary, out_dir)
    return summary
