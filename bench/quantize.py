"""Float32 against int8 weights (``load(quantize="int8")``) on a bundled model, side by side in one run.

    OMP_NUM_THREADS=2 python bench/quantize.py --out bench/results/quantize

Both loads of the same checkpoint on the CPU: weight bytes (the memory plan's ``model_bytes``
and the linear weights alone), then every official file of the waiting-line tasks and the 4x4
Latin square, whole, and ``--fresh`` fresh samples per task (``dllm.bench.parallelbench_fresh``,
seed ``--fresh-seed``), zero-shot (the protocol the bundled models were trained with), one token
per step at gen length 32. The two models decode each task's batches alternately (float32 first
on even batches, int8 first on odd ones), so load on a shared machine falls on both. Per model
and task: score and decode tokens/s; and how many answers differ between the two. Writes JSON +
markdown.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn

import dllm
from dllm.bench.metrics import score
from dllm.bench.parallelbench_fresh import FRESH_TASKS, fresh_samples
from dllm.bench.results_store import cpu_model
from dllm.data.prompts import build_messages, default_data_dir, load_samples, load_task_configs
from dllm.engine.memory import model_bytes
from dllm.models.quantize import tensor_bytes

MODES = ("float32", "int8")


def linear_bytes(model: nn.Module) -> int:
    return sum(tensor_bytes(m.weight) for m in model.modules() if isinstance(m, nn.Linear))


def run_set(models: dict, specs: dict, samples: dict[str, list[dict]], batch: int) -> dict:
    """Decode and score every task's samples with both models, alternating which goes first."""
    out = {}
    for task, rows in samples.items():
        spec = specs[task]
        per = {m: {"texts": [], "scores": [], "tokens": 0, "seconds": 0.0} for m in MODES}
        for b, start in enumerate(range(0, len(rows), batch)):
            chunk = rows[start:start + batch]
            for mode in (MODES if b % 2 == 0 else MODES[::-1]):
                lm = models[mode]
                ids = [lm.encode(build_messages(spec, s, 0)) for s in chunk]
                t = time.perf_counter()
                res = lm.generate_ids(ids, gen_length=32, block_length=32, steps=32)
                per[mode]["seconds"] += time.perf_counter() - t
                per[mode]["tokens"] += sum(st["tokens"] for st in res.stats)
                per[mode]["texts"] += res.texts
                per[mode]["scores"] += [score(spec.metric, text, s) for text, s in zip(res.texts, chunk)]
        out[task] = {
            "samples": len(rows),
            "differ": sum(a != b for a, b in zip(per["float32"]["texts"], per["int8"]["texts"])),
            **{m: {"score": 100 * sum(p["scores"]) / len(p["scores"]), "tokens_per_s": p["tokens"] / p["seconds"],
                   "seconds": p["seconds"]} for m, p in per.items()},
        }
        print(task, json.dumps({k: v for k, v in out[task].items()}), file=sys.stderr)
    return out


def totals(result: dict) -> dict:
    n = sum(r["samples"] for r in result.values())
    return {"samples": n, "differ": sum(r["differ"] for r in result.values()),
            **{m: {"score": sum(r[m]["score"] for r in result.values()) / len(result),
                   "seconds": sum(r[m]["seconds"] for r in result.values())} for m in MODES}}


def markdown(res: dict) -> str:
    w = res["weights"]
    lines = [f"# float32 vs int8 weights: {res['model']}", "", f"`{res['command']}`", "",
             f"{res['cpu']}, {res['threads']} threads, shared with other jobs (load average before "
             f"{res['load_average_before'][0]:.2f}); torch {res['torch']}, torchao {res['torchao']}. "
             "Zero-shot, one token per step, gen length 32; the two models alternate batch by batch.", "",
             "| weights | float32 | int8 | ratio |", "|---|---|---|---|",
             f"| model (memory plan) | {w['float32']['model_bytes']:,} | {w['int8']['model_bytes']:,} | "
             f"{w['int8']['model_bytes'] / w['float32']['model_bytes']:.2f} |",
             f"| linears | {w['float32']['linear_bytes']:,} | {w['int8']['linear_bytes']:,} | "
             f"{w['int8']['linear_bytes'] / w['float32']['linear_bytes']:.2f} |",
             f"| quantized linears (all but the LM head) | {w['float32']['quantized_linear_bytes']:,} | "
             f"{w['int8']['quantized_linear_bytes']:,} | "
             f"{w['int8']['quantized_linear_bytes'] / w['float32']['quantized_linear_bytes']:.2f} |", ""]
    fresh_label = f"fresh samples ({res['fresh']} per task, seed {res['fresh_seed']})"
    for label, key, total in (("official files (whole)", "official", "official_total"),
                              (fresh_label, "fresh_samples", "fresh_total")):
        lines += [f"## {label}", "", "| task | samples | float32 score | int8 score | answers that differ | "
                  "float32 tok/s | int8 tok/s | int8 / float32 |", "|---|---|---|---|---|---|---|---|"]
        for task, r in res[key].items():
            f, q = r["float32"], r["int8"]
            lines.append(f"| {task} | {r['samples']} | {f['score']:.1f} | {q['score']:.1f} | {r['differ']} | "
                         f"{f['tokens_per_s']:.0f} | {q['tokens_per_s']:.0f} | {q['tokens_per_s'] / f['tokens_per_s']:.2f} |")
        t = res[total]
        lines += [f"| **mean / all** | {t['samples']} | {t['float32']['score']:.1f} | {t['int8']['score']:.1f} | "
                  f"{t['differ']} | | | {t['float32']['seconds'] / t['int8']['seconds']:.2f} (time ratio) |", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="output stem (.json and .md are written)")
    ap.add_argument("--model", default=None, help="checkpoint or bundled model (default: the bundled LLaDA-layout one)")
    ap.add_argument("--fresh", type=int, default=20)
    ap.add_argument("--fresh-seed", type=int, default=4_200_032)
    ap.add_argument("--batch", type=int, default=25)
    ap.add_argument("--data", type=Path, default=None)
    args = ap.parse_args()
    data = args.data or default_data_dir()
    load_average = os.getloadavg()
    models = {m: dllm.load(args.model, device="cpu", dtype="float32", quantize=None if m == "float32" else m)
              for m in MODES}
    weights = {m: {"model_bytes": model_bytes(lm.model), "linear_bytes": linear_bytes(lm.model),
                   "quantized_linear_bytes": linear_bytes(lm.model) - tensor_bytes(lm.model.lm_head.weight)}
               for m, lm in models.items()}
    specs = load_task_configs(data)
    for lm in models.values():  # warm-up: first-call dispatch and allocator growth are not timed
        lm.generate_ids([lm.encode(build_messages(specs[FRESH_TASKS[0]], load_samples(data, FRESH_TASKS[0])[0], 0))] * 25,
                        gen_length=32, block_length=32, steps=32)
    official = run_set(models, specs, {t: load_samples(data, t) for t in FRESH_TASKS}, args.batch)
    fresh = run_set(models, specs, {t: fresh_samples(data, t, args.fresh, args.fresh_seed) for t in FRESH_TASKS},
                    args.batch)
    import torchao

    res = {"command": "OMP_NUM_THREADS=%s python %s" % (os.environ.get("OMP_NUM_THREADS", ""), " ".join(sys.argv)),
           "model": str(models["float32"].path.name), "cpu": cpu_model(), "threads": torch.get_num_threads(),
           "load_average_before": load_average, "load_average_after": os.getloadavg(),
           "torch": torch.__version__, "torchao": torchao.__version__, "weights": weights,
           "fresh": args.fresh, "fresh_seed": args.fresh_seed, "official": official, "fresh_samples": fresh,
           "official_total": totals(official), "fresh_total": totals(fresh)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(res))
    print(args.out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
