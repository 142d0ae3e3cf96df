"""Command line: ``dllm generate | bench parallelbench | bench throughput | train-filter``."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from dllm.cli_options import add_generation_options, add_model_options, generation_config


def cmd_generate(args: argparse.Namespace) -> int:
    import dllm

    config = generation_config(args)  # validate before loading anything
    model = dllm.load(args.model, device=args.device, dtype=args.dtype)
    chat = False if args.raw else None
    out = model.generate(args.prompt, config, chat=chat)
    for text, stats in zip(out.texts, out.stats):
        if args.json:
            print(json.dumps({"text": text, **stats}))
        else:
            print(text)
            tps = stats["tokens"] / stats["seconds"] if stats["seconds"] > 0 else float("inf")
            print(f"[NFE {stats['nfe']} | TPF {stats['tpf']:.2f} | {tps:.1f} tokens/s on {args.device}]",
                  file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dllm", description="Parallel decoding for masked-diffusion LMs")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="generate text for one or more prompts",
                         formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    gen.add_argument("prompt", nargs="+", help="prompt text (chat template applied when the tokenizer has one)")
    gen.add_argument("--raw", action="store_true", help="do not apply the chat template")
    gen.add_argument("--json", action="store_true", help="one JSON line per prompt with text and stats")
    add_model_options(gen)
    add_generation_options(gen)
    gen.set_defaults(func=cmd_generate)
    for register in _extra_commands():
        register(sub)
    return parser


def _extra_commands():
    """Subcommands contributed by other modules (bench, training of filters)."""
    from dllm.bench.cli import register_bench
    from dllm.train.filter_cli import register as register_train_filter

    yield register_bench
    yield register_train_filter


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as err:
        print(f"dllm: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
