"""KV-cache speed: prefix, dual and sub-block caching against no cache, side by side in one run.

    python bench/cache_speed.py --out bench/results/cache_speed
    python bench/cache_speed.py --gen-lengths 512 --modes none dual adaptive --out ...

Random LLaDA-shaped model (d_model 768, 12 layers, vocab 32,000: 134M parameters),
low_confidence at a fixed number of tokens per step, block 32, batch 1, stop_at_eos off.
Reports NFE, token-forwards (the compute a cache saves), wall-clock and speedup over no cache,
and how many answer tokens differ from the uncached decode (caches are approximate for
bidirectional models). Writes JSON + markdown.
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
from dllm.engine.decoding import decode
from dllm.models.tiny import write_tiny_checkpoint

SHAPE = dict(d_model=768, n_layers=12, n_heads=12, mlp_hidden=2048, vocab_size=32000)
MODES = {"none": {}, "prefix": {"cache": "prefix"}, "dual": {"cache": "dual"},
         "dual + sub-block 8": {"cache": "dual", "sub_block_length": 8},
         "adaptive": {"cache": "adaptive"},
         "adaptive (window choice)": {"cache": "adaptive", "cache_args": {"select": "window"}}}
DEFAULT_MODES = ["none", "prefix", "dual", "dual + sub-block 8"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gen-lengths", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--tokens-per-step", type=int, default=4)
    ap.add_argument("--block-length", type=int, default=32)
    ap.add_argument("--modes", nargs="+", choices=list(MODES), default=DEFAULT_MODES,
                    help="caches to compare, the first is the baseline (default: %(default)s)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = dllm.load(write_tiny_checkpoint(tmp, "llada", **SHAPE))
        params = sum(p.numel() for p in model.model.parameters())
        prompt = [[11 + i for i in range(24)]]
        # decode(), not generate_ids(): a random model predicts ids its small tokenizer cannot decode
        decode(model.model, prompt, dllm.GenerationConfig(gen_length=32, steps=8, stop_at_eos=False))  # warm-up
        for G in args.gen_lengths:
            base = None
            for name in args.modes:
                options = MODES[name]
                cfg = dllm.GenerationConfig(gen_length=G, block_length=args.block_length, stop_at_eos=False,
                                            steps=G // args.tokens_per_step, **options)
                t = time.perf_counter()
                out = decode(model.model, prompt, cfg)
                wall = time.perf_counter() - t
                ids, nfe, tf = out.answer[0].tolist(), int(out.nfe[0]), int(out.token_forwards[0])
                base = base or {"wall": wall, "ids": ids, "tf": tf}
                rows.append({"gen_length": G, "mode": name, "nfe": nfe,
                             "token_forwards": tf, "seconds": wall,
                             "speedup": base["wall"] / wall, "token_forward_ratio": base["tf"] / tf,
                             "tokens_differing_from_none": sum(a != b for a, b in zip(ids, base["ids"])),
                             "kv_cache_peak_mib": out.memory["kv_cache_peak_bytes"] / 2**20,
                             "model_mib": out.memory["model_bytes"] / 2**20})
                print(rows[-1], flush=True)
    machine = f"{platform.machine()} CPU, {torch.get_num_threads()} threads, torch {torch.__version__}"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"params": params, "machine": machine, "rows": rows}, indent=1) + "\n")
    md = [f"{params / 1e6:.0f}M-parameter random LLaDA, {args.tokens_per_step} tokens/step, block {args.block_length}, {machine}.", "",
          "| gen | cache | NFE | token-forwards | seconds | speedup | compute saved | tokens differing from none | KV cache MiB (model MiB) |",
          "|---|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['gen_length']} | {r['mode']} | {r['nfe']} | {r['token_forwards']} | {r['seconds']:.1f} | "
           f"{r['speedup']:.2f}x | {r['token_forward_ratio']:.1f}x | {r['tokens_differing_from_none']} | "
           f"{r['kv_cache_peak_mib']:.1f} ({r['model_mib']:.0f}) |" for r in rows]
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
