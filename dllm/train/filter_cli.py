"""``dllm train-filter``: collect oracle traces with the runtime and train a Learn2PD filter."""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from dllm.cli.output import LOGGER_NAME

log = logging.getLogger(LOGGER_NAME)


def cmd_train_filter(args: argparse.Namespace) -> int:
    import torch

    from dllm.cli.options import load_from_args
    from dllm.cli.output import check_output_dir, progress_bar
    from dllm.data.prompts import default_data_dir
    from dllm.train.learn2pd import FilterTraining, collect_traces, prompts_from_corpus, train_filter

    opts = FilterTraining(block_length=args.block_length, epochs=args.epochs, lr=args.lr, tau=args.tau,
                          seed=args.seed)
    out = check_output_dir(args.out)
    data_dir = Path(args.data) if args.data else default_data_dir()
    lm = load_from_args(args)
    by_length = prompts_from_corpus(lm.encode, data_dir, args.tasks, args.samples, args.seed)
    for gen_length in by_length:
        if gen_length % opts.block_length:
            raise ValueError(f"the tasks answer in {gen_length} tokens, not a multiple of "
                             f"--block-length {opts.block_length}; pick a block length that divides it")
    log.debug("tracing %s prompt(s) per answer length with %s", {g: len(p) for g, p in by_length.items()}, lm.path)
    confs, labels = [], []
    bar = progress_bar(sum(len(p) for p in by_length.values()), desc="oracle traces", quiet=args.quiet)
    for gen_length, prompts in sorted(by_length.items()):
        for i in range(0, len(prompts), args.batch_size):
            batch = prompts[i : i + args.batch_size]
            c, y = collect_traces(lm.model, batch, gen_length, opts.block_length)
            confs.append(c)
            labels.append(y)
            bar.update(len(batch))
    bar.close()
    log.info("training the filter on %d traced steps (%d epochs)", sum(len(c) for c in confs), opts.epochs)
    module, report = train_filter(torch.cat(confs), torch.cat(labels), opts)
    module.save(out, {"tau": opts.tau, "block_length": opts.block_length, "report": report,
                      "model": lm.path.name, "tasks": args.tasks,
                      "prompts": args.samples, "epochs": opts.epochs, "lr": opts.lr})
    print(json.dumps(report, indent=1))
    return 0


def register(sub) -> None:
    p = sub.add_parser("train-filter", help="train a Learn2PD filter for a model")
    p.fill_later(_add_options)
    p.set_defaults(func=cmd_train_filter)


def _add_options(p: argparse.ArgumentParser) -> None:
    from dllm.cli.options import add_model_options, positive_int

    add_model_options(p)
    p.add_argument("--data", default=None, help="ParallelBench data dir (names and templates only; "
                   "default: $DLLM_PARALLELBENCH_DIR or ../shared/data/parallelbench)")
    p.add_argument("--tasks", nargs="+", default=None, help="task names (default: every training task)")
    p.add_argument("--samples", type=positive_int, default=256, help="prompts to trace")
    p.add_argument("--block-length", type=positive_int, default=32, help="filter width = decode block length")
    p.add_argument("--epochs", type=positive_int, default=3000, help="full-batch AdamW epochs")
    p.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate")
    p.add_argument("--tau", type=float, default=0.96, help="acceptance threshold for the report")
    p.add_argument("--batch-size", type=positive_int, default=64, help="prompts decoded together")
    p.add_argument("--seed", type=int, default=0, help="corpus and training seed")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="output directory for filter.safetensors + filter.json (created if missing)")
