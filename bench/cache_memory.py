"""The memory plan of real model shapes (dllm.engine.memory; shapes only, no weights).

    python bench/cache_memory.py --out bench/results/cache_memory

The plan is what the engine checks against ``memory_budget_mb``: the caches allocate exactly
the planned K/V bytes (tests/cache/test_memory.py) and the whole plan bounds the measured peak
(tests/cache/test_memory_peak.py, bench/memory_peak.py). Models are built on the meta device,
so LLaDA-8B and Dream-7B shapes cost nothing here.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from dllm.engine.config import GenerationConfig
from dllm.engine.memory import MIB, plan_memory
from dllm.models.config import ArchConfig
from dllm.models.transformer import DiffusionTransformer

# shape, dtype, and the statistics kernel it would run (CPU: torch reference; GPU: Triton)
SHAPES = {
    "random LLaDA 134M (bench/cache_speed.py), fp32, CPU": (dict(d_model=768, n_layers=12, n_heads=12, n_kv_heads=12,
                                                                 mlp_hidden_size=2048, vocab_size=32000),
                                                            torch.float32, "torch"),
    "LLaDA-8B, bf16, GPU": (dict(d_model=4096, n_layers=32, n_heads=32, n_kv_heads=32, mlp_hidden_size=12288,
                                 vocab_size=126464), torch.bfloat16, "triton"),
    "Dream-7B (GQA, 4 KV heads), bf16, GPU": (dict(d_model=3584, n_layers=28, n_heads=28, n_kv_heads=4,
                                                   mlp_hidden_size=18944, vocab_size=152064), torch.bfloat16, "triton"),
}
BLOCK = 32
SETUPS = [("dual cache", {"cache": "dual", "block_length": BLOCK}),
          ("dual + FreeDave K=8", {"cache": "dual", "block_length": BLOCK, "strategy": "freedave",
                                   "strategy_args": {"num_drafts": 8}})]


def meta_model(shape: dict, dtype: torch.dtype) -> DiffusionTransformer:
    cfg = ArchConfig(family="llada", rope_theta=10000.0, rms_norm_eps=1e-5, max_sequence_length=8192,
                     mask_token_id=0, eos_token_ids=(1,), pad_token_id=1, **shape)
    with torch.device("meta"):
        return DiffusionTransformer(cfg).to(dtype)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--prompt-length", type=int, default=256)
    ap.add_argument("--gen-lengths", type=int, nargs="+", default=[256, 512, 1024])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    args = ap.parse_args()
    rows = []
    for label, (shape, dtype, backend) in SHAPES.items():
        model = meta_model(shape, dtype)
        for setup, options in SETUPS:
            for batch in args.batches:
                for G in args.gen_lengths:
                    length = args.prompt_length + G
                    config = GenerationConfig(gen_length=G, steps=G, **options)
                    plan = plan_memory(model, batch, length, config, backend=backend)
                    rows.append({"model": label, "setup": setup, "batch": batch, "canvas": length,
                                 **{k: v / MIB for k, v in plan.as_dict().items()}})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    md = [f"Prompt {args.prompt_length} tokens, blocks of {BLOCK}; MiB. Logits in the model's dtype for the widest forward (the "
          "canvas, or the candidate rows' window); activations: one layer's working set in that forward; "
          "statistics: the confidence statistics' working set over the widest window (torch reference on "
          "CPU, Triton kernel on GPU).", "",
          "| model | setup | batch | canvas | model | KV cache | KV / model | logits | activations | statistics | total |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['model']} | {r['setup']} | {r['batch']} | {r['canvas']} | {r['model_bytes']:,.0f} | "
           f"{r['kv_cache_bytes']:,.0f} | {r['kv_cache_bytes'] / r['model_bytes']:.2f} | {r['logits_bytes']:,.0f} | "
           f"{r['activation_bytes']:,.0f} | {r['statistics_bytes']:,.0f} | {r['total_bytes']:,.0f} |" for r in rows]
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
