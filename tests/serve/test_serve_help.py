"""``dllm serve --help`` says what the decoding flags mean for a server: the shared help of
``generate`` said "block size (default: gen-length)" (the server decodes blocks of 32), "sampling
seed (default: 0)" (the server never uses it: a request without a seed draws a fresh one) and
"answer canvas" for what is the default max_tokens of a request."""
from __future__ import annotations

import argparse
import re

from dllm.cli import build_parser
from dllm.serve.cli import server_defaults
from dllm.serve.requests import DEFAULT_BLOCK_LENGTH


def _help(command: str) -> dict[str, str]:
    """Flag -> its help as ``dllm COMMAND --help`` prints it (whitespace joined)."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps: dict[str, list[str]] = {}
    flag = None
    for line in sub.choices[command].format_help().split("\n"):
        start = re.match(r"  (?:-\w, )?(--[\w-]+)(?: [A-Z_]+)?(.*)", line)
        if start:
            flag, line = start.group(1), start.group(2)
        if flag is not None:
            helps.setdefault(flag, []).append(line)
    return {flag: " ".join(" ".join(lines).split()) for flag, lines in helps.items()}


def test_serve_help_gives_the_servers_own_defaults():
    serve = _help("serve")
    assert f"(default: {DEFAULT_BLOCK_LENGTH})" in serve["--block-length"]
    assert server_defaults(build_parser().parse_args(["serve"])).block_length == DEFAULT_BLOCK_LENGTH
    assert serve["--seed"].startswith("refused") and "(default: 0)" not in serve["--seed"]
    assert serve["--gen-length"].startswith("max_tokens of a request") and "(default: 128)" in serve["--gen-length"]
    assert server_defaults(build_parser().parse_args(["serve"])).max_tokens == 128
    assert serve["--max-tokens"].startswith("max_tokens of a request")


def test_generate_help_keeps_its_own():
    generate = _help("generate")
    assert generate["--block-length"] == "block size (default: gen-length; a uniform-state model's canvas_length)"
    assert generate["--seed"] == "sampling seed (default: 0)"
