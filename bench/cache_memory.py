"""KV-cache memory next to the model's own, from dllm.memory's plan (shapes only, no weights).

    python bench/cache_memory.py --out bench/results/cache_memory

The plan is what the engine checks against ``memory_budget_mb`` and what the caches allocate
(tests/cache/test_memory.py asserts planned == allocated). Models are built on the meta device,
so LLaDA-8B and Dream-7B shapes cost nothing here.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from dllm.config import GenerationConfig
from dllm.memory import MIB, plan_memory
from dllm.models.config import ArchConfig
from dllm.models.transformer import DiffusionTransformer

SHAPES = {
    "random LLaDA 134M (bench/cache_speed.py), fp32": (dict(d_model=768, n_layers=12, n_heads=12, n_kv_heads=12,
                                                            mlp_hidden_size=2048, vocab_size=32000), torch.float32),
    "LLaDA-8B, bf16": (dict(d_model=4096, n_layers=32, n_heads=32, n_kv_heads=32, mlp_hidden_size=12288,
                            vocab_size=126464), torch.bfloat16),
    "Dream-7B (GQA, 4 KV heads), bf16": (dict(d_model=3584, n_layers=28, n_heads=28, n_kv_heads=4,
                                              mlp_hidden_size=18944, vocab_size=152064), torch.bfloat16),
}
SETUPS = [("dual cache", {"cache": "dual"}),
          ("dual + FreeDave K=8", {"cache": "dual", "strategy": "freedave", "strategy_args": {"num_drafts": 8}})]


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
    for label, (shape, dtype) in SHAPES.items():
        model = meta_model(shape, dtype)
        for setup, options in SETUPS:
            for batch in args.batches:
                for G in args.gen_lengths:
                    length = args.prompt_length + G
                    plan = plan_memory(model, batch, length, GenerationConfig(gen_length=G, **options))
                    rows.append({"model": label, "setup": setup, "batch": batch, "canvas": length,
                                 **{k: v / MIB for k, v in plan.as_dict().items()}})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    md = [f"Prompt {args.prompt_length} tokens; MiB. Logits: float32, whole-canvas forward of every candidate row (an upper bound).", "",
          "| model | setup | batch | canvas | model | KV cache | KV / model | logits | total |", "|---|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['model']} | {r['setup']} | {r['batch']} | {r['canvas']} | {r['model_bytes']:,.0f} | "
           f"{r['kv_cache_bytes']:,.0f} | {r['kv_cache_bytes'] / r['model_bytes']:.2f} | {r['logits_bytes']:,.0f} | "
           f"{r['total_bytes']:,.0f} |" for r in rows]
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
