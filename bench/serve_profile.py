"""Profile the batching scheduler in-process (no HTTP): Poisson arrivals straight into
``BatchScheduler`` on the bundled model, for each mode. Reports latency / TTFT percentiles,
throughput, and where the time goes: forwards, rows per forward, canvas tokens forwarded against
the rows' own tokens (the rest is padding), rebuilds and their cost, the fitted forward overhead.

    python bench/serve_profile.py --rate 8 --requests 80 --cache none --out bench/results/serve_profile/none_8.json

``--rows-sweep`` instead times one decode round against the rows in the batch (1, 2, 4, 8 rows
of 32 answer tokens, each cache): how far a forward's cost is from flat in rows.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import threading
import time
from pathlib import Path

import torch

import dllm
from dllm.bench.serve_load import bench_prompts, percentile
from dllm.engine.config import GenerationConfig
from dllm.runner.model_runner import ModelRunner
from dllm.serve import running_batch
from dllm.serve.protocol import SchedulerLimits, ServeRequest
from dllm.serve.scheduler import BatchScheduler


class Probe:
    """Counts forwards, their rows and tokens, and rebuilds, by wrapping two methods."""

    def __init__(self) -> None:
        self.reset()
        self.install()

    def reset(self) -> None:
        self.forwards = self.rows = self.tokens = self.own_tokens = self.rebuilds = 0
        self.forward_s = self.rebuild_s = 0.0

    def install(self) -> None:
        probe, model_call, rebuild = self, ModelRunner._model, running_batch.RunningBatch.rebuild

        def timed_model(runner, tokens, positions, visible, cache, write_at, head):
            start = time.perf_counter()
            out = model_call(runner, tokens, positions, visible, cache, write_at, head)
            probe.forward_s += time.perf_counter() - start
            probe.forwards += 1
            probe.rows += tokens.shape[0]
            probe.tokens += tokens.numel()
            # the tokens each row would forward on its own canvas: its real keys in this window
            window = runner.canvas.valid[:, write_at : write_at + tokens.shape[1]]
            probe.own_tokens += int(window.sum())
            return out

        def timed_rebuild(batch, joining):
            start = time.perf_counter()
            rebuild(batch, joining)
            probe.rebuild_s += time.perf_counter() - start
            probe.rebuilds += 1

        ModelRunner._model = timed_model
        running_batch.RunningBatch.rebuild = timed_rebuild


def run(args: argparse.Namespace, continuous: bool, lm, requests: list[ServeRequest], probe: Probe) -> dict:
    probe.reset()
    sent, first, done = {}, {}, {}
    finished = threading.Event()

    def on_update(update) -> None:
        now = time.perf_counter()
        if update.final_ids and update.request_id not in first:
            first[update.request_id] = now
        if update.finished:
            done[update.request_id] = (now, update.stats.get("tokens", 0))
            if len(done) == len(requests):
                finished.set()

    limits = SchedulerLimits(max_batch=args.max_batch, max_queue=10_000, continuous=continuous,
                             forward_overhead_tokens=args.forward_overhead_tokens)
    scheduler = BatchScheduler(lm.model, limits)
    rng, at, start = random.Random(args.seed), 0.0, time.perf_counter()
    for request in requests:
        at += rng.expovariate(args.rate)
        delay = start + at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        sent[request.request_id] = time.perf_counter()
        scheduler.submit(request, on_update)
    finished.wait(args.timeout)
    wall = time.perf_counter() - start
    overhead = scheduler.cost.overhead_tokens
    scheduler.close()
    latency = [done[k][0] - sent[k] for k in done]
    ttft = [first[k] - sent[k] for k in first]
    tokens = sum(t for _, t in done.values())
    return {"mode": "continuous" if continuous else "static", "completed": len(done), "wall_s": wall,
            "tokens_per_s": tokens / wall, "latency_p50_s": percentile(latency, 50),
            "latency_p99_s": percentile(latency, 99), "ttft_p50_s": percentile(ttft, 50),
            "ttft_p99_s": percentile(ttft, 99), "forwards": probe.forwards,
            "forwards_per_answer_token": probe.forwards / max(tokens, 1),
            "rows_per_forward": probe.rows / max(probe.forwards, 1),
            "forward_ms": 1000 * probe.forward_s / max(probe.forwards, 1), "forward_s": probe.forward_s,
            "tokens_forwarded": probe.tokens, "padding_share": 1 - probe.own_tokens / max(probe.tokens, 1),
            "rebuilds": probe.rebuilds, "rebuild_ms": 1000 * probe.rebuild_s / max(probe.rebuilds, 1),
            "rebuild_share": probe.rebuild_s / wall, "fitted_overhead_tokens": None if math.isinf(overhead) else overhead}


def rows_sweep(lm, args: argparse.Namespace) -> dict:
    """Best-of-3 seconds per round of a decode of 1, 2, 4 and 8 prompts, per cache."""
    from dllm.engine.decoding import decode

    prompts = [lm.encode(p, chat=False) for p in bench_prompts(8, args.seed)]
    out = {}
    for cache in ("none", "prefix", "dual"):
        config = GenerationConfig(gen_length=32, block_length=args.block_length, policy="low_confidence",
                                  cache=cache, stop_at_eos=False)
        for rows in (1, 2, 4, 8):
            best = math.inf
            for _ in range(3):
                start = time.perf_counter()
                result = decode(lm.model, prompts[:rows], config)
                best = min(best, (time.perf_counter() - start) / int(result.nfe.max()))
            out[f"{cache}/{rows}"] = 1000 * best
    return {"ms_per_round": out, "prompt_tokens": [len(p) for p in prompts]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="checkpoint directory (default: the bundled LLaDA model)")
    p.add_argument("--rate", type=float, default=8.0)
    p.add_argument("--requests", type=int, default=80)
    p.add_argument("--cache", default="none")
    p.add_argument("--max-tokens", default="16,32")
    p.add_argument("--block-length", type=int, default=8)
    p.add_argument("--max-batch", type=int, default=8)
    p.add_argument("--forward-overhead-tokens", type=float, default=None)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rows-sweep", action="store_true", help="time a round against the rows in it instead")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    lm = dllm.load(args.model, device="cpu") if args.model else dllm.load(device="cpu")
    rng = random.Random(args.seed)
    pool = bench_prompts(32, args.seed)
    lengths = [int(x) for x in args.max_tokens.split(",")]
    requests = [ServeRequest(request_id=f"r{i}", prompt_ids=lm.encode(rng.choice(pool), chat=False), seed=0,
                             config=GenerationConfig(gen_length=rng.choice(lengths), block_length=args.block_length,
                                                     policy="low_confidence", cache=args.cache))
                for i in range(args.requests)]
    lm.generate("warm up", chat=False, gen_length=8, block_length=8)
    if args.rows_sweep:
        result = {"load_average_before": os.getloadavg(), **rows_sweep(lm, args), "load_average_after": os.getloadavg()}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps(result))
        return
    probe = Probe()
    result = {"rate": args.rate, "requests": args.requests, "cache": args.cache, "load_average_before": os.getloadavg(),
              "modes": [run(args, mode, lm, requests, probe) for mode in (True, False)],
              "load_average_after": os.getloadavg()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
