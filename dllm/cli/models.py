"""``dllm models``: the bundled models, with family, size and scores."""
from __future__ import annotations

import argparse
import json


def cmd_models(args: argparse.Namespace) -> int:
    from dllm.models.bundled import DEFAULT_MODEL, bundled_models  # imported by the command, not by `dllm --help`

    rows = []
    for model in bundled_models().values():
        scores = model.scores or {}
        rows.append({"name": model.name, "model_type": model.config.get("model_type"),
                     "parameters": model.parameters, "size_mb": round(model.size_bytes / 2**20, 2),
                     "default": model.name == DEFAULT_MODEL, "score": _rounded(scores.get("mean")),
                     "score_protocol": scores.get("protocol"), "path": str(model.path)})
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    print(f"{'name':<28} {'layout':<16} {'params':>8} {'size':>8}  ParallelBench mean (1 token/step)")
    for row in rows:
        score = "not measured" if row["score"] is None else f"{100 * row['score']:.1f}% ({row['score_protocol']})"
        name = row["name"] + (" *" if row["default"] else "")
        print(f"{name:<28} {row['model_type']:<16} {row['parameters'] / 1e6:>7.2f}M {row['size_mb']:>6.2f}MB  {score}")
    print("* the default of dllm.load() and --model; load any by name: dllm.load(NAME), --model NAME")
    return 0


def _rounded(score: float | None) -> float | None:
    """A score as measured, without float noise (0.8600000000000001 -> 0.86)."""
    return None if score is None else round(score, 6)


def register(sub) -> None:
    p = sub.add_parser("models", help="list the bundled models (load them by name)")
    p.add_argument("--json", action="store_true", help="one JSON line per model")
    p.set_defaults(func=cmd_models)
