"""Planned vs measured peak memory of decodes on CPU (tiny random LLaDA, ragged batch of 2).

    python bench/memory_peak.py --out bench/results/memory_peak

Measured: the rise of the resident-set peak over the decode, in a fresh process whose
allocator returns freed blocks (dllm.bench.peak_memory); planned: the plan's bytes on top of
the model (``decode_bytes``), the bound ``memory_budget_mb`` is checked with.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from dllm.bench.peak_memory import measure_in_subprocess
from dllm.engine.config import GenerationConfig
from dllm.engine.memory import MIB
from dllm.models.tiny import write_tiny_checkpoint

PROMPTS = [[5, 6, 7, 8, 9], [10, 11, 12]]
SETUPS = {
    "none": {},
    "prefix": {"cache": "prefix"},
    "dual": {"cache": "dual"},
    "dual + sub-blocks of 1/4 block": {"cache": "dual", "sub_blocks": 4},
    "none + FreeDave K=4": {"strategy": "freedave", "strategy_args": {"num_drafts": 4}},
    "dual + FreeDave K=4": {"cache": "dual", "strategy": "freedave", "strategy_args": {"num_drafts": 4}},
    "dual + LoPA 2 branches": {"cache": "dual", "strategy": "lopa", "strategy_args": {"branches": 2}},
}


def config(gen_length: int, options: dict) -> GenerationConfig:
    """Four blocks, two steps per decision window."""
    options = dict(options)
    block = gen_length // 4
    sub_blocks = options.pop("sub_blocks", 1)
    if sub_blocks > 1:
        options["sub_block_length"] = block // sub_blocks
    return GenerationConfig(gen_length=gen_length, block_length=block, steps=2 * 4 * sub_blocks, **options)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gen-lengths", type=int, nargs="+", default=[256, 1024, 4096])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_tiny_checkpoint(Path(tmp) / "llada", "llada", max_len=1 << 21, seed=1)
        runs = [(G, name) for G in args.gen_lengths for name in SETUPS]
        results = measure_in_subprocess(path, PROMPTS, [config(G, SETUPS[name]) for G, name in runs], timeout=7200)
    rows = []
    for (G, name), r in zip(runs, results):
        plan = r["plan"]
        rows.append({"gen_length": G, "setup": name, "measured_mib": r["measured_bytes"] / MIB,
                     "planned_mib": r["planned_decode_bytes"] / MIB,
                     **{k: v / MIB for k, v in plan.items() if k not in ("model_bytes", "total_bytes")}})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    md = ["Tiny random LLaDA (d_model 64, 2 layers, 4 heads, vocab 300), 2 ragged prompts, 4 blocks x 2 "
          "steps, float32, one thread; MiB on top of the loaded model.", "",
          "| gen | setup | measured peak | planned | planned / measured | KV | logits | activations | statistics |",
          "|---|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['gen_length']} | {r['setup']} | {r['measured_mib']:.1f} | {r['planned_mib']:.1f} | "
           f"{r['planned_mib'] / r['measured_mib']:.2f} | {r['kv_cache_bytes']:.1f} | {r['logits_bytes']:.1f} | "
           f"{r['activation_bytes']:.1f} | {r['statistics_bytes']:.1f} |" for r in rows]
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
