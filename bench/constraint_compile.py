"""Time to compile a required tool call's constraint over a 151k-token vocabulary (the size of the
Qwen2 tokenizers of Dream, Fast-dLLM v2 and SDAR), for 2, 8 and 16 tools of three arguments.

The vocabulary is synthetic (random 1-6 character strings over JSON's characters): what the compile
costs depends on the DFA's states and the vocabulary's size, not on which strings it holds.
Usage: python bench/constraint_compile.py [--revision REV]  (REV: compile with token_dfa.py as it
was at that commit, side by side, and check the transitions are the same).
"""
from __future__ import annotations

import argparse
import importlib.util
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from dllm.api.tools import parse_tool_choice
from dllm.samplers.constraints import ConstraintSpec, token_dfa

VOCABULARY = 151_000


def _module_at(revision: str):
    source = subprocess.run(["git", "show", f"{revision}:dllm/samplers/constraints/token_dfa.py"], check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "token_dfa_then.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("token_dfa_then", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--revision", default=None, help="also compile with token_dfa.py at this commit")
    args = parser.parse_args()
    rng = random.Random(0)
    alphabet = 'abcdefghijklmnopqrstuvwxyz_{}[]":, 0123456789'
    spelled = tuple("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6))).encode() for _ in range(VOCABULARY))
    versions = [("now", token_dfa)] + ([(args.revision, _module_at(args.revision))] if args.revision else [])
    for count in (2, 8, 16):
        tools = [{"type": "function", "function": {"name": f"tool_{i}", "parameters": {
            "type": "object", "required": ["query"], "properties": {
                "query": {"type": "string"}, "limit": {"type": "integer"}, "flag": {"type": "boolean"}}}}}
            for i in range(count)]
        regex = ConstraintSpec.parse(json_schema=parse_tool_choice(tools, "required").schema()).to_regex()
        cells, moves = [f"{count} tools"], []
        for name, module in versions:
            start = time.perf_counter()
            try:
                dfa = module.compile_regex(regex, spelled, 0)
            except ValueError as err:
                cells.append(f"{name}: {type(err).__name__} after {time.perf_counter() - start:.1f} s")
                continue
            cells.append(f"{name}: {time.perf_counter() - start:.1f} s, {dfa.num_states} states, "
                         f"{dfa.table.shape[1]} classes")
            moves.append(dfa.table[:, dfa.token_class])
        if len(moves) == 2:
            cells.append("same transitions" if np.array_equal(*moves) else "TRANSITIONS DIFFER")
        print(" | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
