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

    opts = FilterTraining(block_length=args.block_length, epochs=args.epochs, lr=args.lr, tau=args.tau,
                          seed=args.seed)
    if args.samples <= 0 or args.batch_size <= 0:
        raise SystemExit("--samples and --batch-size must be positive")
    data_dir = Path(args.data) if args.data else default_data_dir()
    lm = dllm.load(args.model, device=args.device)
    by_length = prompts_from_corpus(lm.encode, data_dir, args.tasks, args.samples, args.seed)
    for gen_length in by_length:
        if gen_length % opts.block_length:
            raise SystemExit(f"the tasks answer in {gen_length} tokens, not a multiple of "
                             f"--block-length {opts.block_length}; pick a block length that divides it")
    confs, labels = [], []
    for gen_length, prompts in sorted(by_length.items()):
        for i in range(0, len(prompts), args.batch_size):
            c, y = collect_traces(lm.model, prompts[i : i + args.batch_size], gen_length, opts.block_length)
            confs.append(c)
            labels.append(y)
    module, report = train_filter(torch.cat(confs), torch.cat(labels), opts)
    module.save(Path(args.out), {"tau": opts.tau, "block_length": opts.block_length, "report": report,
                                 "model": str(Path(args.model).name), "tasks": args.tasks,
                                 "prompts": args.samples, "epochs": opts.epochs, "lr": opts.lr})
    print(json.dumps(report, indent=1))
    return 0


def register(sub) -> None:
    p = sub.add_parser("train-filter", help="train a Learn2PD filter for a model",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", required=True, help="checkpoint directory")
    p.add_argument("--data", default=None, help="ParallelBench data dir (names and templates only; "
                   "default: $DLLM_PARALLELBENCH_DIR or ../shared/data/parallelbench)")
    p.add_argument("--tasks", nargs="+", default=None, help="task names (default: every training task)")
    p.add_argument("--samples", type=int, default=256, help="prompts to trace")
    p.add_argument("--block-length", type=int, default=32, help="filter width = decode block length")
    p.add_argument("--epochs", type=int, default=3000, help="full-batch AdamW epochs")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--tau", type=float, default=0.96, help="acceptance threshold for the report")
    p.add_argument("--batch-size", type=int, default=64, help="prompts decoded together")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="output directory for filter.safetensors + filter.json")
    p.set_defaults(func=cmd_train_filter)
