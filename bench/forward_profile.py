"""Where a decode's time goes on a GPU: torch.profiler over a short decode of a random model.

The GPU check reports window forwards far above the roofline (llada-1b, batch 1, dual cache:
13.9 ms against a 0.55 ms ceiling on an H100). This prints the operators by GPU time and by
CPU time for one decode per cache mode, next to a bare forward of the same window timed with
CUDA events, so the gap can be attributed (kernels, launches, host syncs).

    PYTHONPATH=. python bench/forward_profile.py --model llada-1b --caches none prefix dual
"""
from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from dllm.bench.random_models import build_random_model
from dllm.engine.config import GenerationConfig
from dllm.engine.decoding import decode


def bare_forward_ms(model, batch: int, tokens: int, repeats: int = 20) -> float:
    """Median CUDA-event time of model(input_ids, position_ids) on a window of ``tokens``."""
    ids = torch.randint(3, 500, (batch, tokens), device=model.device)
    pos = torch.arange(tokens, device=model.device)[None].expand(batch, -1)
    times = []
    for _ in range(repeats + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        model(ids, pos)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times[3:])[len(times[3:]) // 2]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llada-1b")
    p.add_argument("--caches", nargs="+", default=["none", "prefix", "dual"])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt-length", type=int, default=256)
    p.add_argument("--gen-length", type=int, default=64)
    p.add_argument("--block-length", type=int, default=32)
    p.add_argument("--rows", type=int, default=25)
    args = p.parse_args()
    device = torch.device("cuda")
    model = build_random_model(args.model, device=device, dtype=torch.bfloat16)
    print(f"{args.model} on {torch.cuda.get_device_name(device)}, torch {torch.__version__}")
    for tokens in (args.block_length, args.prompt_length + args.gen_length):
        print(f"bare forward, batch {args.batch} x {tokens} tokens: {bare_forward_ms(model, args.batch, tokens):.2f} ms")
    prompts = torch.randint(3, 500, (args.batch, args.prompt_length)).tolist()
    for cache in args.caches:
        cfg = GenerationConfig(gen_length=args.gen_length, steps=args.gen_length // (args.block_length // 2),
                               block_length=args.block_length, cache=cache, stop_at_eos=False)
        decode(model, prompts, cfg)  # warm-up
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            decode(model, prompts, cfg)
            torch.cuda.synchronize()
        table = prof.key_averages()
        print(f"\n=== cache {cache}: by GPU time ===")
        print(table.table(sort_by="cuda_time_total", row_limit=args.rows, max_name_column_width=60))
        print(f"=== cache {cache}: by CPU time ===")
        print(table.table(sort_by="cpu_time_total", row_limit=args.rows, max_name_column_width=60))


if __name__ == "__main__":
    main()
