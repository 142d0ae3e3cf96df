"""Forwards and canvas tokens of the batching scheduler on a mixed-length workload, continuous
against static, in process (no HTTP): hardware-independent counts beside `dllm bench serve`'s
times.

    python bench/serve_forwards.py          # the server's default block (32)
    python bench/serve_forwards.py max      # one block of each request's max_tokens (the old default)

12 waiting-line prompts of the bundled model, max_tokens drawn from 8 / 32 / 128 / 448, submitted
0.3 s apart, max batch 8; each request is parsed as the server parses it (ServerDefaults).
"""
from __future__ import annotations

import random
import sys
import threading
import time

import dllm
from dllm.bench.serve_load import bench_prompts
from dllm.serve.protocol import SchedulerLimits, ServeRequest
from dllm.serve.requests import ServerDefaults, parse_request
from dllm.serve.scheduler import BatchScheduler


def main() -> None:
    block = sys.argv[1] if len(sys.argv) > 1 else None
    lm = dllm.load()
    model = lm.model
    rng = random.Random(0)
    bodies = [{"prompt": p, "max_tokens": rng.choice([8, 32, 128, 448]), "seed": i}
              for i, p in enumerate(bench_prompts(12, 0))]
    if block == "max":
        for body in bodies:
            body["block_length"] = body["max_tokens"]
    requests = []
    for i, body in enumerate(bodies):
        parsed = parse_request(body, lm, ServerDefaults(), chat=False, served_name="m")
        requests.append(ServeRequest(request_id=f"r{i}", prompt_ids=parsed.prompt_ids[0], config=parsed.config, seed=i))
    counts = {"forwards": 0, "tokens": 0}
    forward = model.forward

    def counted(input_ids, *args, **kwargs):
        counts["forwards"] += 1
        counts["tokens"] += input_ids.numel()  # canvas tokens this forward ran
        return forward(input_ids, *args, **kwargs)

    model.forward = counted
    for continuous in (True, False):
        counts.update(forwards=0, tokens=0)
        ended: dict[str, float] = {}
        all_done = threading.Event()

        def on_update(update, ended=ended):
            if update.finished:
                ended[update.request_id] = time.perf_counter()
                if len(ended) == len(requests):
                    all_done.set()

        scheduler = BatchScheduler(lm, SchedulerLimits(max_batch=8, max_queue=64, continuous=continuous))
        start, sent = time.perf_counter(), {}
        for request in requests:
            sent[request.request_id] = time.perf_counter()
            scheduler.submit(request, on_update)
            time.sleep(0.3)
        all_done.wait(900)
        scheduler.close()
        latency = sorted(ended[r] - sent[r] for r in ended)
        print(f"block={block or 'server'} {'continuous' if continuous else 'static'}: forwards {counts['forwards']} "
              f"canvas tokens {counts['tokens']} wall {time.perf_counter() - start:.1f} s latency p50 "
              f"{latency[len(latency) // 2]:.2f} s max {latency[-1]:.2f} s", flush=True)


if __name__ == "__main__":
    main()
