"""Baseline decode speed: tokens/s and NFE of the reference rule on a ~100M random LLaDA.

    python bench/baseline_speed.py --out bench/results/baseline_speed

One token per step (steps = gen_length, low_confidence, no cache) at gen 128 and 256, block 32.
A random model never emits end-of-text early here (stop_at_eos off), so every row decodes the
whole answer: the numbers measure the runtime, not the model. Writes JSON + markdown.
"""
from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import torch

import dllm
from dllm.models.tiny import write_tiny_checkpoint

SHAPE = dict(d_model=768, n_layers=12, n_heads=12, mlp_hidden=2048, vocab_size=32000)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gen-lengths", type=int, nargs="+", default=[128, 256])
    ap.add_argument("--block-length", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_tiny_checkpoint(tmp, "llada", **SHAPE)
        model = dllm.load(path, device=args.device)
        params = sum(p.numel() for p in model.model.parameters())
        prompt = [[11 + i for i in range(24)]] * args.batch_size
        rows = []
        for G in args.gen_lengths:
            cfg = dllm.GenerationConfig(gen_length=G, block_length=args.block_length, steps=G, stop_at_eos=False)
            model.generate_ids(prompt, dllm.GenerationConfig(gen_length=32, steps=4, stop_at_eos=False))  # warm-up
            t = time.perf_counter()
            out = model.generate_ids(prompt, cfg)
            wall = time.perf_counter() - t
            tokens = sum(s["tokens"] for s in out.stats)
            rows.append({"gen_length": G, "block_length": args.block_length, "batch_size": args.batch_size,
                         "nfe": out.stats[0]["nfe"], "tpf": out.stats[0]["tpf"], "seconds": wall,
                         "tokens_per_s": tokens / wall, "token_forwards": out.stats[0]["token_forwards"]})
            print(rows[-1], flush=True)
    machine = f"{platform.machine()} CPU, {torch.get_num_threads()} threads" if args.device == "cpu" else torch.cuda.get_device_name()
    result = {"model": {"family": "llada", "params": params, **SHAPE}, "machine": machine,
              "torch": torch.__version__, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    md = [f"Random LLaDA-shaped model, {params / 1e6:.0f}M parameters, {machine}, torch {torch.__version__}.", "",
          "| gen | block | batch | NFE | TPF | token-forwards | seconds | tokens/s |", "|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['gen_length']} | {r['block_length']} | {r['batch_size']} | {r['nfe']} | {r['tpf']:.2f} | "
           f"{r['token_forwards']} | {r['seconds']:.1f} | {r['tokens_per_s']:.2f} |" for r in rows]
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
