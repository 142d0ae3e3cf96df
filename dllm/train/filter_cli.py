"""``dllm train-filter``: collect oracle traces with the runtime and train a Learn2PD filter."""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def cmd_train_filter(args: argparse.Namespace) -> int:
    import torch

    import dllm
    from dllm.data.prompts import default_data_dir
    from dllm.train.learn2pd import FilterTraining, collect_traces, prompts_from_corpus, train_filter

    opts = FilterTraining(block_length=args.block_length, epochs=args.epochs, tau=args.tau, seed=args.seed)
    model = dllm.load(args.model)
    data_dir = Path(args.data) if args.data else default_data_dir()
    by_length = prompts_from_corpus(model.tokenizer, data_dir, args.tasks, args.samples, args.seed)
    confs, labels = [], []
    for gen_length, prompts in by_length.items():
        if gen_length % opts.block_length:
            raise ValueError(f"gen_length {gen_length} is not a multiple of --block-length {opts.block_length}")
        for i in range(0, len(prompts), args.batch_size):
            c, y = collect_traces(model.model, prompts[i : i + args.batch_size], gen_length, opts.block_length)
            confs.append(c)
            labels.append(y)
    module, report = train_filter(torch.cat(confs), torch.cat(labels), opts)
    module.save(Path(args.out), {"tau": opts.tau, "block_length": opts.block_length, "report": report,
                                 "model": Path(args.model).name, "samples": args.samples})
    print(json.dumps(report, indent=1))
    return 0


def register(sub) -> None:
    p = sub.add_parser("train-filter", help="train a Learn2PD filter for a model",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", required=True, help="checkpoint directory")
    p.add_argument("--data", default=None, help="ParallelBench data dir (templates and names only)")
    p.add_argument("--tasks", nargs="+", default=None, help="task names (default: every training task)")
    p.add_argument("--samples", type=int, default=256, help="prompts to trace")
    p.add_argument("--block-length", type=int, default=32)
    p.add_argument("--epochs", type=int, default=3000)
    p.add_argument("--tau", type=float, default=0.96, help="acceptance threshold recorded with the filter")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="output directory for filter.safetensors + filter.json")
    p.set_defaults(func=cmd_train_filter)
