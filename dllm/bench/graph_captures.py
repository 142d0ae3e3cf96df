"""How many CUDA graphs a workload captures (``cuda_graphs=True``), and what the captured canvas
lengths cost: per scenario the decodes, forwards, captures, K/V slots made and token-forwards.

Counts, not times: they do not depend on the machine. On a CPU the capture is emulated
(``graphs.EmulatedGraph``: the recorded forward re-run on the same static buffers), as in the
tests; on CUDA it is real, and ``capture_s`` is then the time capturing took.

    python -m dllm.bench.graph_captures --device cpu
"""
from __future__ import annotations

import argparse
import random
import sys
import weakref

import torch

from dllm.bench.random_models import build_random_model
from dllm.engine.config import GenerationConfig
from dllm.engine.decoding import decode
from dllm.runner import graphs


def scenarios(seed: int = 0) -> list[tuple[str, str, list[tuple[list[list[int]], dict]]]]:
    """(model shape, label, [(prompts, config options)]): one long decode per answer length, per
    cache 20 single requests of 8-199 prompt tokens one after another (a server's stream, without
    batching), and a block-causal model's long decode (SDAR-shaped: model blocks of 4)."""
    rng = random.Random(seed)
    out = []
    for gen in (256, 896):
        out.append(("tiny-llada", f"dual, 1 prompt of 16, gen {gen}, block 32",
                    [([[5] * 16], dict(gen_length=gen, block_length=32, steps=gen // 4, cache="dual"))]))
    for cache in ("dual", "none", "prefix"):
        jobs = [([[rng.randrange(3, 200) for _ in range(rng.randrange(8, 200))]],
                 dict(gen_length=64, block_length=32, steps=16, cache=cache)) for _ in range(20)]
        out.append(("tiny-llada", f"{cache}, 20 requests of 8-199 prompt tokens, gen 64, block 32", jobs))
    for cache in ("dual", "none"):
        out.append(("tiny-sdar", f"block-causal (model blocks of 4), {cache}, 1 prompt of 16, gen 256, block 4",
                    [([[5] * 16], dict(gen_length=256, block_length=4, steps=128, cache=cache))]))
    return out


def count(model, jobs) -> dict:
    """Run ``jobs`` replayed from a fresh graph runner; its counts and the decodes' forwards."""
    graphs.forget(model)
    forwards = token_forwards = 0
    for prompts, options in jobs:
        out = decode(model, prompts, GenerationConfig(**options, cuda_graphs=True))
        forwards += int(out.nfe.max())
        token_forwards += int(out.token_forwards.sum())
    stats = graphs.graph_stats(model)
    return {"decodes": len(jobs), "forwards": forwards, "captures": stats["captures"],
            "slots_made": stats["kv_slots"] + stats["evicted_slots"], "token_forwards": token_forwards,
            "capture_s": stats["capture_seconds"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dllm.bench.graph_captures", description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type != "cuda":
        graphs.BACKEND = graphs.EmulatedGraph
    graphs._RUNNERS = weakref.WeakKeyDictionary()
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    models = {}
    print("| scenario | decodes | forwards | captures | K/V slots made | token-forwards |")
    print("|---|---|---|---|---|---|")
    for shape, label, jobs in scenarios():
        if shape not in models:
            torch.manual_seed(0)
            models[shape] = build_random_model(shape, device=device, dtype=dtype)
        r = count(models[shape], jobs)
        print(f"| {label} | {r['decodes']} | {r['forwards']} | {r['captures']} | {r['slots_made']} | "
              f"{r['token_forwards']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
