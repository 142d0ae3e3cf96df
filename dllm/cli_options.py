"""Command-line option helpers shared by every command that loads a model or decodes.

Commands (``dllm/cli.py``, ``dllm/bench/*``, ``dllm/train/filter_cli.py``) import from here;
this module imports nothing of theirs, so the command layer sits above the library.
"""
from __future__ import annotations

import argparse
import json
from typing import Any, Sequence


def parse_kv(pairs: Sequence[str] | None) -> dict[str, Any]:
    """["k=v", ...] -> {k: v} with v parsed as JSON when possible (numbers, bools)."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise SystemExit(f"expected key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def add_generation_options(p: argparse.ArgumentParser) -> None:
    """Options shared by every command that decodes."""
    g = p.add_argument_group("decoding")
    g.add_argument("--policy", default="low_confidence", help="unmasking rule (default: %(default)s)")
    g.add_argument("--policy-arg", action="append", metavar="K=V", help="rule option, repeatable")
    g.add_argument("--strategy", default="plain", help="decoding strategy (default: %(default)s)")
    g.add_argument("--strategy-arg", action="append", metavar="K=V", help="strategy option, repeatable")
    g.add_argument("--stopper", default="none", help="stopping criterion (default: %(default)s)")
    g.add_argument("--stopper-arg", action="append", metavar="K=V", help="stopper option, repeatable")
    g.add_argument("--cache", default="none", help="KV cache: none | prefix | dual (default: %(default)s)")
    g.add_argument("--sub-block-length", type=int, default=None, help="sub-block cache size (default: off)")
    g.add_argument("--cache-arg", action="append", metavar="K=V",
                   help="cache option, repeatable (e.g. refresh_every=4)")
    g.add_argument("--gen-length", type=int, default=128, help="answer tokens (default: %(default)s)")
    g.add_argument("--block-length", type=int, default=None, help="block size (default: gen-length)")
    g.add_argument("--steps", type=int, default=None, help="step budget (default: gen-length)")
    g.add_argument("--temperature", type=float, default=0.0, help="(default: %(default)s)")
    g.add_argument("--top-p", type=float, default=None, help="nucleus filter (default: off)")
    g.add_argument("--top-k", type=int, default=None, help="top-k filter (default: off)")
    g.add_argument("--cfg-scale", type=float, default=0.0, help="classifier-free guidance (default: %(default)s)")
    g.add_argument("--no-stop-at-eos", action="store_true", help="decode every position even after end-of-text")
    g.add_argument("--seed", type=int, default=0, help="(default: %(default)s)")
    g.add_argument("--memory-budget-mb", type=float, default=None,
                   help="refuse a decode whose planned peak memory (MiB: weights, KV cache, logits, "
                        "activations, statistics) exceeds this (default: no check)")


def generation_config(args: argparse.Namespace):
    from dllm.config import GenerationConfig

    return GenerationConfig(
        gen_length=args.gen_length, block_length=args.block_length, steps=args.steps,
        policy=args.policy, policy_args=parse_kv(args.policy_arg),
        strategy=args.strategy, strategy_args=parse_kv(args.strategy_arg),
        stopper=args.stopper, stopper_args=parse_kv(args.stopper_arg),
        cache=args.cache, sub_block_length=args.sub_block_length, cache_args=parse_kv(args.cache_arg),
        temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
        cfg_scale=args.cfg_scale, stop_at_eos=not args.no_stop_at_eos, seed=args.seed,
        memory_budget_mb=args.memory_budget_mb,
    )


def add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="checkpoint directory (default: the bundled model)")
    p.add_argument("--device", default="cpu", help="(default: %(default)s)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="(default: %(default)s)")
