"""ParallelBench evaluation: official prompts and metrics, any policy, quality against speed.

Reads the official JSONL + task_config.yaml files from a data directory (never shipped with
dllm), builds prompts exactly as the benchmark does (template, its one-shot turn unless told
otherwise, chat template), decodes each task with every configured run, scores with the
benchmark's metric definitions (reimplemented in dllm.bench.metrics) and writes per-sample
JSONL, a summary (JSON + CSV) with PBx values as each (run, task) finishes, then Pareto plots.

Everything that can be wrong with the input (data, tasks, runs, their rule / strategy / stopper
/ cache objects, the output folder, prompt lengths) is checked before the first forward.
"""
from __future__ import annotations

import dataclasses
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn
from tqdm import tqdm

from dllm.api.model import DiffusionLM
from dllm.bench.metrics import score
from dllm.bench.parallelbench_fresh import FreshSamples, check_fresh_request, fresh_samples
from dllm.bench.results_store import ReadOnlyStore, ResultStore, run_metadata
from dllm.engine.config import GenerationConfig
from dllm.data.prompts import TaskSpec, build_messages, load_samples, load_task_configs
from dllm.engine.decoding import check_prompts
from dllm.models.bundled import model_label
from dllm.models.prepack import is_prepacked
from dllm.models.quantize import quantization_of
from dllm.engine.policies import check_policies

log = logging.getLogger("dllm")

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
    ``tokens_per_step`` sets steps = gen_length / tokens_per_step for each task; ``gen_length``
    decodes every task on that canvas instead of the task's own (``max_tokens``), to check that
    an answer does not depend on how much room it is given."""

    name: str
    line: str
    options: dict[str, Any] = field(default_factory=dict)
    tokens_per_step: int | None = None
    gen_length: int | None = None

    def config(self, gen_length: int) -> GenerationConfig:
        options = dict(self.options)
        if self.tokens_per_step is not None:
            if gen_length % self.tokens_per_step:
                raise ValueError(f"run {self.name}: tokens_per_step {self.tokens_per_step} does not divide gen_length {gen_length}")
            options["steps"] = gen_length // self.tokens_per_step
        options.setdefault("block_length", gen_length)
        return GenerationConfig(gen_length=gen_length, **options)


def check_run(run: Run, gen_length: int) -> GenerationConfig:
    """The run's config for ``gen_length`` with its rule, stopper, strategy and cache built once,
    so a bad option (an unknown name, tau "high") fails before any task is decoded."""
    try:
        config = run.config(gen_length)
        check_policies(config)
    except (TypeError, ValueError, KeyError, FileNotFoundError) as err:
        raise ValueError(f"run {run.name!r} (gen_length {gen_length}): {err}; fix this run's options "
                         "(--runs file or --policy-arg) before benchmarking") from err
    return config


def select_samples(samples: list[dict], limit: int | None) -> tuple[list[int], str]:
    """Indices of the samples to evaluate and how they were chosen.

    ``limit`` None (or >= the file's size) takes the whole file. A smaller ``limit`` takes
    evenly spaced samples across the file, one from the middle of each of ``limit`` equal
    strata: the official files are ordered by list length, so a prefix would cover only the
    shortest lists while this keeps every length in proportion.
    """
    n = len(samples)
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1 sample per task, got {limit}; leave it out to use every sample")
    if limit is None or limit >= n:
        return list(range(n)), "all"
    return [(2 * i + 1) * n // (2 * limit) for i in range(limit)], "stratified"


@dataclass(kw_only=True, slots=True)
class TaskPlan:
    """One (run, task) pair, validated: its config, samples and what identifies its results."""

    run: Run
    spec: TaskSpec
    config: GenerationConfig
    shots: int
    samples: list[dict]
    indices: list[int]
    sampling: str  # "all" or "stratified" (see select_samples)
    available: int  # samples in the task's file (or its fresh set)
    fresh: FreshSamples | None = None  # None: the official file

    def fingerprint(self, model: str, weights: dict[str, Any]) -> dict[str, Any]:
        """What must match for a stored row to count as this pair's result (``weights``: see
        ``weights_record``)."""
        key = {"line": self.run.line, "config": _config_dict(self.config), "shots": self.shots,
               "sample_ids": self.indices, "model": model, **weights}
        if self.fresh is not None:
            key["source"] = self.fresh.label
        return key


def plan_parallelbench(data_dir: Path, runs: list[Run], *, tasks: list[str], shots: int | None,
                       limit: int | None, batch_size: int, fresh: FreshSamples | None = None) -> list[TaskPlan]:
    """Validate everything about a benchmark before any model work; one TaskPlan per (run, task).

    ``shots`` None follows the benchmark's protocol (each task's own one-shot example count).
    ``fresh`` replaces each task's official file by freshly generated samples (same templates
    and scorer; see dllm.bench.parallelbench_fresh).
    """
    if not data_dir.is_dir():
        raise FileNotFoundError(f"ParallelBench data directory {data_dir} not found; pass --data DIR "
                                "or set DLLM_PARALLELBENCH_DIR")
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    if shots is not None and shots < 0:
        raise ValueError(f"shots must be >= 0, got {shots}")
    if not runs:
        raise ValueError("no runs to evaluate; give --policy or --runs FILE")
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise ValueError(f"run names must be unique, got {sorted({n for n in names if names.count(n) > 1})} twice")
    known = load_task_configs(data_dir)
    unknown = sorted(set(tasks) - set(known))
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; known: {sorted(known)}")
    if fresh is not None:
        check_fresh_request(tasks, fresh.count, fresh.seed)
        samples = {task: fresh_samples(data_dir, task, fresh.count, fresh.seed) for task in tasks}
    else:
        samples = {task: load_samples(data_dir, task) for task in tasks}
    plans = []
    for run in runs:
        for task in tasks:
            spec = known[task]
            indices, sampling = select_samples(samples[task], limit)
            plans.append(TaskPlan(run=run, spec=spec, config=check_run(run, run.gen_length or spec.max_tokens),
                                  shots=spec.icl_example_count if shots is None else shots,
                                  samples=[samples[task][i] for i in indices], indices=indices, sampling=sampling,
                                  available=len(samples[task]), fresh=fresh))
    return plans


def evaluate_task(model: DiffusionLM, plan: TaskPlan, *, batch_size: int, store: ResultStore,
                  progress: tqdm | None = None) -> dict[str, Any]:
    """Decode and score one (run, task) pair; its per-sample JSONL is written before returning."""
    spec, config, run = plan.spec, plan.config, plan.run
    records, seconds = [], 0.0
    for start in range(0, len(plan.samples), batch_size):
        batch = plan.samples[start : start + batch_size]
        messages = [build_messages(spec, s, plan.shots) for s in batch]
        ids = [model.encode(m) for m in messages]
        out = model.generate_ids(ids, config)
        seconds += out.stats[0]["seconds"]
        for sample, msg, text, st, order in zip(batch, messages, out.texts, out.stats, out.decode_order):
            records.append({"prompt": msg, "output": text, "label": sample["answer"],
                            "score": score(spec.metric, text, sample), "nfe": st["nfe"], "tpf": st["tpf"],
                            "tokens": st["tokens"], "draft_rows": st["draft_rows"],
                            "token_forwards": st["token_forwards"], "decode_order": order})
        if progress is not None:
            progress.update(len(batch))
    store.write_samples(run.name, spec.name, records)
    scored = [r["score"] for r in records if r["score"] is not None]
    n = len(records)
    return {
        "run": run.name, "line": run.line, "task": spec.name, "samples": n, "of": plan.available,
        "sampling": plan.sampling, "sample_ids": plan.indices, "shots": plan.shots,
        **({"source": plan.fresh.label} if plan.fresh is not None else {}),
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
    """Per run: mean score over tasks, TPF, NFE, samples and shots; per line: PBx."""
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
        entry["samples"] = sum(t["samples"] for t in entry["tasks"].values())
        entry["shots"] = sorted({t.get("shots") for t in entry["tasks"].values()}, key=str)
    lines: dict[str, list[dict[str, Any]]] = {}
    for entry in runs.values():
        lines.setdefault(entry["line"], []).append(entry)
    pb = {line: {f"PB{x}": max((e["tpf"] for e in es if e["mean_score"] is not None and 100 * e["mean_score"] >= x), default=0.0)
                 for x in PB_LEVELS} for line, es in lines.items()}
    return {"runs": list(runs.values()), "pb": pb}


def qps(speedup: float, score_: float, baseline: float, gamma: float = 4.0) -> float:
    """QPS_gamma = speedup * (score / baseline)^gamma (SchED)."""
    return speedup * (score_ / baseline) ** gamma if baseline else 0.0


def weights_record(model: nn.Module) -> dict[str, Any]:
    """How the weights ran: their dtype, whether they were prepacked (``load(prepack=True)``) and
    quantized (``load(quantize=...)``)."""
    return {"dtype": str(model.dtype).removeprefix("torch."), "prepack": is_prepacked(model),
            "quantize": quantization_of(model)}


def model_name(model: DiffusionLM) -> str:
    path = getattr(model, "path", None)
    return model_label(path) if path else type(model).__name__


def check_prompt_lengths(model: DiffusionLM, plans: list[TaskPlan]) -> None:
    """Every prompt (one-shot turns included) plus the answer fits the model's context."""
    seen: set[tuple[str, int]] = set()
    for plan in plans:
        key = (plan.spec.name, plan.shots)
        if key in seen:
            continue
        seen.add(key)
        ids = [model.encode(build_messages(plan.spec, s, plan.shots)) for s in plan.samples]
        try:
            check_prompts(ids, plan.config, model.model.config.max_sequence_length)
        except ValueError as err:
            raise ValueError(f"{plan.spec.name} with {plan.shots} shot(s): {err}"
                             + ("; or pass --shots 0" if plan.shots else "")) from err


def run_parallelbench(model: DiffusionLM, data_dir: Path, runs: list[Run], *, tasks: list[str],
                      shots: int | None, limit: int | None, batch_size: int, out_dir: Path,
                      plans: list[TaskPlan] | None = None, show_progress: bool = False,
                      fresh: FreshSamples | None = None, writes: bool = True) -> dict[str, Any]:
    """Evaluate every run on every task and return the summary.

    Results go to ``out_dir`` as they are made: each finished (run, task) rewrites summary.json
    / .csv atomically. Pairs already in ``out_dir``'s summary with the same options, shots and
    samples are skipped, so an interrupted or extended sweep resumes where it stopped. Plots
    are drawn last and only if matplotlib is installed (results never depend on it). ``writes``
    False: a tensor-parallel rank other than 0, which decodes alike and writes nothing.
    """
    store = (ResultStore if writes else ReadOnlyStore)(out_dir)  # a bad --out fails here, before any forward
    if plans is None:
        plans = plan_parallelbench(data_dir, runs, tasks=tasks, shots=shots, limit=limit, batch_size=batch_size,
                                   fresh=fresh)
    name, weights = model_name(model), weights_record(model.model)
    pending, done = [], 0
    for plan in plans:
        if store.finished(plan.run.name, plan.spec.name, plan.fingerprint(name, weights)) is None:
            pending.append(plan)
        else:
            done += len(plan.samples)
    if writes and len(pending) < len(plans):
        log.info("resumed %d of %d (run, task) pairs: already in %s, skipped", len(plans) - len(pending),
                 len(plans), out_dir / "summary.json")
    check_prompt_lengths(model, pending)
    store.start(run_metadata(model=name, data_dir=data_dir, device=str(getattr(model.model, "device", "cpu"))))
    total = done + sum(len(p.samples) for p in pending)
    with tqdm(total=total, initial=done, desc="parallelbench", unit="sample", file=sys.stderr,
              disable=not show_progress, dynamic_ncols=True) as progress:
        for plan in pending:
            progress.set_postfix_str(f"{plan.run.name} {plan.spec.name}", refresh=False)
            row = evaluate_task(model, plan, batch_size=batch_size, store=store, progress=progress)
            row.update(model=name, **weights)
            store.add(row)
            store.write_summary(summarize(store.rows))
    summary = summarize(store.rows)
    store.write_summary(summary)
    summary["plots"] = draw_plots({"meta": store.meta, "rows": store.rows, **summary}, out_dir) if writes else ""
    return summary


def draw_plots(summary: dict[str, Any], out_dir: Path) -> list[Path] | str:
    """Pareto plots beside the summary, or a note on how to get them when matplotlib is absent."""
    from dllm.bench.plots import MissingMatplotlib, plot_pareto

    try:
        return plot_pareto(summary, out_dir / "pareto.png")
    except MissingMatplotlib as err:
        return str(err)
