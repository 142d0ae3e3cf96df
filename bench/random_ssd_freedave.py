"""SSD and FreeDave on a random 134M LLaDA (issue 42, item 5): forwards per answer token side by
side with the stepwise decode they both reproduce, on real-sized layers where no training is
involved (the bundled models' 1M-parameter layers could flatter or hide the drafts).

    python bench/random_ssd_freedave.py --out bench/results/random_ssd_freedave.json

Random prompts of different lengths (one ragged batch), low_confidence at one token per step,
one block, no cache, stop_at_eos off so every row decodes its whole answer. Forwards per token
and rows per forward are hardware-independent; seconds are the machine's (named in the output).
"""
from __future__ import annotations

import argparse
import json
import platform
import tempfile
from pathlib import Path

import torch

import dllm
from dllm.engine.decoding import decode
from dllm.models.tiny import write_tiny_checkpoint

SHAPE = dict(d_model=768, n_layers=12, n_heads=12, mlp_hidden=2048, vocab_size=32000)  # 134M, as baseline_speed.py
RUNS = {"stepwise": {}, "freedave_K4": {"strategy": "freedave", "strategy_args": {"num_drafts": 4}},
        "freedave_K8": {"strategy": "freedave", "strategy_args": {"num_drafts": 8}},
        "ssd_N4": {"strategy": "ssd", "strategy_args": {"num_drafts": 4}},
        "ssd_N8": {"strategy": "ssd", "strategy_args": {"num_drafts": 8}}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gen-length", type=int, default=16)
    ap.add_argument("--prompt-lengths", type=int, nargs="+", default=[12, 20, 28])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(args.seed)
    prompts = [torch.randint(11, 30000, (n,), generator=gen).tolist() for n in args.prompt_lengths]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = dllm.load(write_tiny_checkpoint(tmp, "llada", **SHAPE), device="cpu")
        params = sum(p.numel() for p in model.model.parameters())
        reference = None
        for name, options in RUNS.items():
            cfg = dllm.GenerationConfig(gen_length=args.gen_length, steps=args.gen_length,
                                        block_length=args.gen_length, stop_at_eos=False, **options)
            # the engine's decode: a random model writes ids its toy tokenizer lacks, so no text
            out = decode(model.model, prompts, cfg)
            answers = out.answer.tolist()
            reference = answers if reference is None else reference
            nfe = int(out.nfe.sum())  # forwards each row took part in, summed over rows
            tokens = len(prompts) * args.gen_length  # stop_at_eos off: every position is decoded
            rows.append({"run": name, "nfe_per_answer": nfe / len(prompts), "forwards_per_token": nfe / tokens,
                         "rows_per_forward": int(out.draft_rows.sum()) / nfe,
                         "same_tokens_as_stepwise": answers == reference, "seconds": out.wall_time})
            print(rows[-1], flush=True)
    result = {"model": {"family": "llada", "params": params, **SHAPE, "random_seed": 0},
              "machine": f"{platform.machine()} CPU, {torch.get_num_threads()} threads, torch {torch.__version__}",
              "prompt_lengths": args.prompt_lengths, "gen_length": args.gen_length, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
