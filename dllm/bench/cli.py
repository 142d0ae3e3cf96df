"""``dllm bench ...`` subcommands; each benchmark module registers its own parser."""
from __future__ import annotations

import argparse


def register_bench(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="benchmarks: parallelbench, throughput, serve")
    bench.fill_later(_add_benchmarks)


def _add_benchmarks(bench: argparse.ArgumentParser) -> None:
    """The benchmarks' parsers, once ``bench`` is chosen (their modules import torch)."""
    bench_sub = bench.add_subparsers(dest="bench_command", required=True)
    for register in _benchmarks():
        register(bench_sub)


def _benchmarks():
    from dllm.bench import parallelbench_cli, serve_load, throughput

    yield parallelbench_cli.register
    yield throughput.register
    yield serve_load.register
