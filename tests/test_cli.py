"""The command line: generate prints text + stats, --help shows defaults, bad input exits 2."""
from __future__ import annotations

import json
import os
import subprocess
import sys


def _dllm(*args, timeout=300):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    return subprocess.run([sys.executable, "-m", "dllm", *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_generate_json(tiny_dirs):
    done = _dllm("generate", "--model", str(tiny_dirs["llada"]), "hello there", "a second prompt",
                 "--gen-length", "16", "--block-length", "8", "--steps", "8", "--json")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(rows) == 2 and all({"text", "nfe", "tpf", "tokens"} <= set(r) for r in rows)
    assert all(r["nfe"] <= 8 for r in rows)


def test_generate_prints_stats_line(tiny_dirs):
    done = _dllm("generate", "--model", str(tiny_dirs["dream"]), "hi", "--gen-length", "8", "--policy", "entropy")
    assert done.returncode == 0, done.stderr
    assert "NFE" in done.stderr and "TPF" in done.stderr and "tokens/s" in done.stderr


def test_help_lists_defaults():
    done = _dllm("generate", "--help")
    assert done.returncode == 0
    for option in ("--policy", "--cache", "--gen-length", "--block-length", "--steps", "--temperature", "--strategy"):
        assert option in done.stdout
    assert "(default: low_confidence)" in done.stdout


def test_bad_option_is_a_clear_error(tiny_dirs):
    done = _dllm("generate", "--model", str(tiny_dirs["llada"]), "hi", "--gen-length", "30", "--block-length", "8")
    assert done.returncode == 2
    assert "not a multiple of block_length" in done.stderr
    done = _dllm("generate", "--model", "/nonexistent/dir", "hi")
    assert done.returncode == 2 and "does not exist" in done.stderr
