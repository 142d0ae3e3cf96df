"""Expert usage of a MoE checkpoint: each MoE layer's share of routed (token, slot) choices per
expert, counted while the model decodes fresh ParallelBench-style samples (one token per step,
zero-shot; every forward of the decode counts, prompt and answer positions alike).

    python bench/moe_expert_usage.py --model dllm-waitingline-moe --per-task 10 --seed 1000000
"""
from __future__ import annotations

import argparse
import json

import torch

import dllm
from dllm.data.prompts import default_data_dir
from dllm.models.moe import MoEMLP
from dllm.train.corpus import TRAIN_TASKS, TaskCorpus


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="dllm-waitingline-moe")
    ap.add_argument("--per-task", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1_000_000)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    lm = dllm.load(args.model)
    layers = {name: mod for name, mod in lm.model.named_modules() if isinstance(mod, MoEMLP)}
    counts = {name: torch.zeros(mod.cfg.n_experts) for name, mod in layers.items()}
    for name, mod in layers.items():
        def recorded(x2d, _route=mod.route, _name=name):
            weights, ids = _route(x2d)
            counts[_name] += torch.bincount(ids.flatten(), minlength=len(counts[_name])).float()
            return weights, ids
        mod.route = recorded
    corpus = TaskCorpus(default_data_dir(), seed=args.seed)
    for task in TRAIN_TASKS:
        for _ in range(args.per_task):
            ex = corpus.sample(task)
            lm.generate(ex.messages, gen_length=ex.gen_length, steps=ex.gen_length)
    # MoEMLP pads calls of fewer than MIN_GEMM_ROWS tokens with zero rows; those are counted too
    shares = {name: [round(x, 3) for x in (c / c.sum()).tolist()] for name, c in counts.items()}
    print(json.dumps({"model": args.model, "samples_per_task": args.per_task, "seed": args.seed,
                      "shares": shares}, indent=1))


if __name__ == "__main__":
    main()
