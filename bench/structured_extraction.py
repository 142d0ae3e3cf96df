"""JSON extraction free and constrained side by side (issue 40, item 4): the sentences of
dllm.data.extraction (a person's name, age, city and membership) answered as a JSON object of
its schema, each batch decoded free, under ``json_schema=`` and under ``grammar=`` (the same
records as a Lark grammar, which compiles to a token DFA) back to back with the same prompts, seeds
and decoding, on each bundled model named. Prints and writes per model, mode and
tokens per step: share of answers valid under the schema (jsonschema decides), field accuracy
(share of the four fields stated exactly, an invalid JSON answer scoring none), tokens per
forward (answer tokens before end-of-text over forwards), wall seconds per decode step and the
constraint's own ms per batch step (mask + commit filter).

    .venv/bin/python bench/structured_extraction.py --samples 40 --tokens-per-step 1 4 \
        --models dllm-waitingline-llada dllm-waitingline-dream --out bench/results/structured/extraction.json
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import dllm
from dllm.data.extraction import GRAMMAR, SCHEMA, field_accuracy, generate_extraction
from dllm.data.names import load_names
from dllm.data.prompts import default_data_dir
from dllm.samplers.constraints import json_answer_errors
from dllm.samplers.constraints.rows import CanvasConstraints

sys.path.insert(0, str(Path(__file__).resolve().parent))
from structured_waiting_line import _timed  # noqa: E402  the same per-method clock

MODES = ("free", "json_schema", "grammar")


def _answer_tokens(lm, text: str) -> int:
    return len(lm.tokenizer(text, add_special_tokens=False)["input_ids"])


def run_model(name: str, samples: list[dict], args, clock: dict) -> list[dict]:
    lm = dllm.load(name)
    rows = []
    for tps in args.tokens_per_step:
        totals = {mode: dict(samples=0, valid=0, fields=0.0, tokens=0, nfe=0, seconds=0.0, steps=0,
                             constraint=0.0, batch_steps=0) for mode in MODES}
        for start in range(0, len(samples), args.batch_size):
            batch = samples[start : start + args.batch_size]
            ids = [lm.encode(s["prompt"]) for s in batch]
            for mode in MODES:  # back to back, so a busy machine slows both alike
                options = dict(max_tokens=args.max_tokens, block_length=args.max_tokens,
                               steps=args.max_tokens // tps)
                if mode == "json_schema":
                    options["json_schema"] = SCHEMA
                elif mode == "grammar":
                    options["grammar"] = GRAMMAR
                clock.clear()
                began = time.perf_counter()
                out = lm.generate_ids(ids, **options)
                total = totals[mode]
                total["seconds"] += time.perf_counter() - began
                total["constraint"] += clock.get("mask_logits", 0.0) + clock.get("filter_commit", 0.0)
                total["batch_steps"] += clock.get("mask_logits_calls", 0)
                for sample, text, stats in zip(batch, out.texts, out.stats):
                    total["samples"] += 1
                    total["valid"] += json_answer_errors(text, SCHEMA) is None
                    total["fields"] += field_accuracy(text, sample["answer"])
                    total["tokens"] += _answer_tokens(lm, text)
                    total["nfe"] += stats["nfe"]
                total["steps"] += max(stats["nfe"] for stats in out.stats)
        for mode in MODES:
            t = totals[mode]
            row = {"model": name, "tokens_per_step": tps, "mode": mode, "samples": t["samples"],
                   "valid": round(t["valid"] / t["samples"], 4), "field_accuracy": round(t["fields"] / t["samples"], 4),
                   "tokens_per_forward": round(t["tokens"] / t["nfe"], 3), "nfe": t["nfe"] / t["samples"],
                   "seconds": round(t["seconds"], 2), "ms_per_step": round(1000 * t["seconds"] / t["steps"], 1),
                   "constraint_ms_per_batch_step": round(1000 * t["constraint"] / t["batch_steps"], 2)
                   if t["batch_steps"] else None}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="folder with first_last_names.yaml")
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", nargs="+", default=["dllm-waitingline-llada"])
    parser.add_argument("--tokens-per-step", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    names = load_names(args.data or default_data_dir())
    samples = generate_extraction(random.Random(args.seed), names, args.samples)
    clock: dict = {}
    _timed(CanvasConstraints, "mask_logits", clock)
    _timed(CanvasConstraints, "filter_commit", clock)
    rows = [row for name in args.models for row in run_model(name, samples, args, clock)]
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        command = "bench/structured_extraction.py " + " ".join(sys.argv[1:])
        args.out.write_text(json.dumps({"command": command, "samples": args.samples, "seed": args.seed,
                                        "max_tokens": args.max_tokens, "schema": SCHEMA, "grammar": GRAMMAR,
                                        "rows": rows},
                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
