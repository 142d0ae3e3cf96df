"""Decode step time under tensor parallelism at 1 / 2 / 4 ranks on this CPU (gloo), the exchange
separated from the compute; one run, so the numbers are ratios within it.

    python bench/tp_step_time.py --out bench/results/tp_step_time

Writes one random LLaDA-shaped checkpoint, then decodes the same prompt with
``dllm.load(path, tensor_parallel=N)`` under torchrun for each N (one thread a rank; TP 1 also
with as many threads as TP 2 has ranks, the same cores), interleaving the sizes over ``--rounds``
rounds and keeping each size's median: the machine is shared, its load changes during a run.
Each rank times its collectives (``TensorShard.all_reduce`` / ``all_gather`` wrapped with a clock):
a barrier first (the wait: ranks arrive at different times, more so on shared cores), then the
collective itself (the exchange, every rank present); the rest of a step is compute (and Python).
The barrier adds one small collective's latency per collective to the step. Per
step and per forward it also records the bytes sent into collectives (``TensorShard`` counters)
and checks that every size decodes rank 0's tokens of TP 1.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dllm.bench.results_store import cpu_model

SHAPE = dict(d_model=1024, n_layers=8, n_heads=16, mlp_hidden=2816, vocab_size=32000)  # ~170M parameters
DECODE = dict(gen_length=64, block_length=32, steps=64, cache="dual", stop_at_eos=False)
PROMPT = "a prompt about the quick brown fox that jumps over the lazy dog " * 2


def worker(model: str, out: str) -> None:
    """One torchrun rank: load the shard, decode twice (warm-up, timed), time every step and
    every collective; rank 0 writes the JSON."""
    import torch

    import dllm
    from dllm import GenerationConfig
    from dllm.engine.decoding import Decoding, RowStart
    from dllm.parallel.dist import leave_together, run_rank

    size = int(os.environ.get("WORLD_SIZE", "1"))

    def body(rank: int) -> None:
        lm = dllm.load(model, device="cpu", dtype="float32", tensor_parallel=size)
        tp = lm.model.tensor_parallel
        clock = {"s": 0.0, "wait": 0.0}
        if tp is not None:  # wrap the shard's collectives with a clock: the wait, then the exchange
            import torch.distributed as dist

            for name in ("all_reduce", "all_gather"):
                inner = getattr(tp, name)

                def timed(*a, _inner=inner, **k):
                    t = time.perf_counter()
                    dist.barrier(group=tp.group)
                    t2 = time.perf_counter()
                    clock["wait"] += t2 - t
                    try:
                        return _inner(*a, **k)
                    finally:
                        clock["s"] += time.perf_counter() - t2

                setattr(tp, name, timed)
        config = GenerationConfig(**DECODE)
        rows = [RowStart(prefix=lm.encode(PROMPT, chat=False), gen_length=config.gen_length)]

        def counters() -> tuple:
            return (0, 0, 0, 0) if tp is None else (tp.bytes_reduced, tp.bytes_gathered, tp.reduces, tp.gathers)

        for timed_run in (False, True):  # the warm-up decodes one block
            decoding = Decoding(lm.model, rows if timed_run else [dataclasses.replace(rows[0], gen_length=32)], config)
            steps = []
            while not decoding.done:
                window = decoding.window
                forwards = decoding.state.forwards
                before, comm, wait, t = counters(), clock["s"], clock["wait"], time.perf_counter()
                decoding.step()
                wall = time.perf_counter() - t
                steps.append({"wall_s": wall, "comm_s": clock["s"] - comm, "wait_s": clock["wait"] - wait,
                              "window": window,
                              "forwards": decoding.state.forwards - forwards,
                              "counts": [a - b for a, b in zip(counters(), before)]})
            if not timed_run:
                continue
            result = decoding.result()
        if rank == 0:
            Path(out).write_text(json.dumps({"steps": steps, "token_ids": result.answer[0].tolist(),
                                             "prompt_tokens": len(rows[0].prefix),
                                             "threads": torch.get_num_threads()}))

    run_rank(body)
    leave_together()


def _summary(run: dict) -> dict:
    """Median step wall / exchange time of the window steps (the block-start steps, which also
    run the refresh forward over the canvas, reported apart) and the bytes each sends."""
    first = {}
    for i, s in enumerate(run["steps"]):
        first.setdefault(s["window"], i)
    refresh = [run["steps"][i] for i in first.values()]
    window = [s for i, s in enumerate(run["steps"]) if i not in first.values()]

    def med(rows, key):
        return statistics.median(r[key] for r in rows)

    return {"step_ms": 1e3 * med(window, "wall_s"), "exchange_ms": 1e3 * med(window, "comm_s"),
            "wait_ms": 1e3 * med(window, "wait_s"),
            "refresh_step_ms": 1e3 * med(refresh, "wall_s"), "refresh_exchange_ms": 1e3 * med(refresh, "comm_s"),
            "window_step_counts": window[0]["counts"], "refresh_step_counts": refresh[0]["counts"],
            "steps": len(run["steps"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("bench/results/tp_step_time"))
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", type=Path, default=None, help="a checkpoint to reuse (default: write a random one)")
    ap.add_argument("--worker", nargs=2, metavar=("MODEL", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        import torch

        torch.set_num_threads(int(os.environ.get("DLLM_BENCH_THREADS", "1")))
        return worker(*args.worker)
    tmp = Path(tempfile.mkdtemp())
    model = args.model
    if model is None:
        from dllm.models.tiny import write_tiny_checkpoint

        model = write_tiny_checkpoint(tmp / "model", "llada", max_len=512, **SHAPE)
    runs = [(n, 1) for n in args.sizes] + [(1, 2)]  # TP 1 on the cores TP 2 uses
    got: dict[str, list[dict]] = {}
    load = []
    for r in range(args.rounds):
        for n, threads in runs:
            out = tmp / f"tp{n}_t{threads}_r{r}.json"
            env = {**os.environ, "OMP_NUM_THREADS": str(threads), "DLLM_BENCH_THREADS": str(threads),
                   "DLLM_DEVICE": "cpu", "PYTHONPATH": os.getcwd()}
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
                   __file__, "--worker", str(model), str(out)]
            load.append(os.getloadavg()[0])
            done = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if done.returncode:
                raise SystemExit(done.stderr[-3000:])
            got.setdefault(f"{n}x{threads}", []).append(json.loads(out.read_text()))
            print(f"round {r} TP {n} x {threads} thread(s): done", flush=True)
    reference = got["1x1"][0]["token_ids"]
    rows = []
    for key, runs_of in got.items():
        n, threads = (int(v) for v in key.split("x"))
        sums = [_summary(run) for run in runs_of]
        pick = {k: statistics.median(s[k] for s in sums) for k in ("step_ms", "exchange_ms", "wait_ms",
                                                                    "refresh_step_ms", "refresh_exchange_ms")}
        rows.append({"tp": n, "threads_per_rank": threads, **pick,
                     "compute_ms": pick["step_ms"] - pick["exchange_ms"] - pick["wait_ms"],
                     "per_round_step_ms": [round(s["step_ms"], 2) for s in sums],
                     "window_step": dict(zip(("bytes_reduced", "bytes_gathered", "reduces", "gathers"),
                                             sums[0]["window_step_counts"])),
                     "refresh_step": dict(zip(("bytes_reduced", "bytes_gathered", "reduces", "gathers"),
                                              sums[0]["refresh_step_counts"])),
                     "tokens_equal_tp1": all(run["token_ids"] == reference for run in runs_of)})
    base = next(r["step_ms"] for r in rows if r["tp"] == 1 and r["threads_per_rank"] == 1)
    for r in rows:
        r["step_ratio_vs_tp1"] = r["step_ms"] / base
    d, layers = SHAPE["d_model"], SHAPE["n_layers"]
    params = layers * (4 * d * d + 3 * d * SHAPE["mlp_hidden"]) + 2 * SHAPE["vocab_size"] * d
    setup = {"shape": SHAPE, "decode": DECODE, "prompt_tokens": got["1x1"][0]["prompt_tokens"],
             "params_M": round(params / 1e6, 1),
             "cpu": cpu_model(), "cores": os.cpu_count(), "load_avg_1min": [round(x, 2) for x in load],
             "rounds": args.rounds, "backend": "gloo", "dtype": "float32"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"setup": setup, "rows": rows}, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(_markdown(setup, rows))
    print(_markdown(setup, rows))


def _markdown(setup: dict, rows: list[dict]) -> str:
    lines = [f"# Tensor-parallel decode step time on CPU (gloo), ratios within one run",
             "",
             f"`python bench/tp_step_time.py` — {setup['params_M']}M-parameter random LLaDA shape "
             f"(d_model {setup['shape']['d_model']}, {setup['shape']['n_layers']} layers, vocabulary "
             f"{setup['shape']['vocab_size']}), float32, batch 1, prompt {setup['prompt_tokens']} tokens, "
             f"gen 64, block 32, one token a step, dual cache. CPU: {setup['cpu']}, {setup['cores']} cores shared with "
             f"other work (1-minute load average at each launch: {min(setup['load_avg_1min'])}–"
             f"{max(setup['load_avg_1min'])}); medians over {setup['rounds']} interleaved rounds. Absolute times "
             "depend on that load; compare within the table. Window step = a step inside a block (the 32-token "
             "window forward + statistics); refresh step = a block's first step (the canvas refresh forward). "
             "Exchange = time inside the collectives once every rank has arrived; wait = time at a barrier before "
             "each (ranks arriving apart); compute = the rest.",
             "",
             "| TP | threads / rank | window step ms | exchange ms | wait ms | compute ms | vs TP 1 | "
             "refresh step ms | refresh exchange ms | bytes reduced / window step | "
             "bytes gathered / window step | collectives / window step | tokens = TP 1 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        w = r["window_step"]
        lines.append(f"| {r['tp']} | {r['threads_per_rank']} | {r['step_ms']:.1f} | {r['exchange_ms']:.1f} | "
                     f"{r['wait_ms']:.1f} | {r['compute_ms']:.1f} | {r['step_ratio_vs_tp1']:.2f}x | "
                     f"{r['refresh_step_ms']:.1f} | {r['refresh_exchange_ms']:.1f} | {w['bytes_reduced']:,} | {w['bytes_gathered']:,} | "
                     f"{w['reduces'] + w['gathers']} | {r['tokens_equal_tp1']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
