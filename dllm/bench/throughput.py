"""``dllm bench throughput``: multi-process runs under torchrun.

Data parallel (default): prompts are sharded over ranks (rank r takes prompts r, r+W, ...),
each rank decodes its share in batches, rank 0 gathers the outputs back in input order.
``--branch-parallel``: every rank decodes every prompt and LoPA's / FreeDave's candidates are
spread over ranks (dllm.parallel.branch_parallel). A rank that raises prints its error and
exits non-zero; torchrun then stops the others, so no partial result is ever reported.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path


def read_prompts(path: Path) -> list:
    """JSONL ({"prompt": str} or {"messages": [...]}) or plain text, one prompt per line."""
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in lines]
        return [r.get("messages") or r["prompt"] for r in rows]
    return lines


def _decode_share(model, prompts: list, indices: list[int], config, batch_size: int, chat) -> list[dict]:
    out = []
    for start in range(0, len(indices), batch_size):
        idx = indices[start : start + batch_size]
        t = time.perf_counter()
        gen = model.generate([prompts[i] for i in idx], config, chat=chat)
        latency = time.perf_counter() - t
        for i, text, ids, st in zip(idx, gen.texts, gen.token_ids, gen.stats):
            out.append({"index": i, "text": text, "token_ids": ids, "latency_s": latency, **st})
    return out


def run(args: argparse.Namespace) -> int:
    import torch.distributed as dist

    import dllm
    from dllm.cli_options import generation_config
    from dllm.parallel.dist import init_distributed, leave_together

    config = generation_config(args)
    ctx = init_distributed(args.device, timeout_s=args.timeout)
    try:
        if os.environ.get("DLLM_FAIL_RANK") == str(ctx.rank):  # fault injection for the failure test
            raise RuntimeError(f"injected failure on rank {ctx.rank}")
        model = dllm.load(args.model, device=str(ctx.device), dtype=args.dtype)
        prompts = read_prompts(Path(args.prompts))
        evaluator = None
        if args.branch_parallel:
            from dllm.parallel.branch_parallel import enable_branch_parallel

            evaluator = enable_branch_parallel(ctx.rank, ctx.world_size)
            indices = list(range(len(prompts)))
        else:
            indices = list(range(ctx.rank, len(prompts), ctx.world_size))
        chat = False if args.raw else None
        start = time.perf_counter()
        rows = _decode_share(model, prompts, indices, config, args.batch_size, chat)
        wall = time.perf_counter() - start
        mine = {"rank": ctx.rank, "wall_s": wall, "requests": len(rows), "tokens": sum(r["tokens"] for r in rows),
                "bytes_gathered": evaluator.bytes_gathered if evaluator else 0,
                "rounds": evaluator.rounds if evaluator else 0}
        everything = [None] * ctx.world_size
        if ctx.world_size > 1:
            dist.all_gather_object(everything, {"rows": rows, "rank_stats": mine})
        else:
            everything = [{"rows": rows, "rank_stats": mine}]
    except Exception as err:  # noqa: BLE001  one clear line per failing rank, then a hard exit
        print(f"dllm: rank {ctx.rank} failed: {err}", file=sys.stderr, flush=True)
        traceback.print_exc()
        os._exit(1)
    if ctx.is_main:
        report(everything, args, config)
    leave_together()
    return 0


def report(everything: list[dict], args: argparse.Namespace, config) -> None:
    per_rank = [e["rank_stats"] for e in everything]
    if args.branch_parallel:
        rows = everything[0]["rows"]  # every rank decoded everything; rank 0's copy is the answer
    else:
        rows = sorted((r for e in everything for r in e["rows"]), key=lambda r: r["index"])
    wall = max(p["wall_s"] for p in per_rank)
    tokens = sum(r["tokens"] for r in rows)
    nfe = sum(r["nfe"] for r in rows)
    summary = {
        "mode": "branch_parallel" if args.branch_parallel else "data_parallel",
        "world_size": len(per_rank), "requests": len(rows), "tokens": tokens, "wall_s": wall,
        "tokens_per_s": tokens / wall if wall else None, "nfe_per_request": nfe / len(rows),
        "tpf": tokens / nfe if nfe else None,
        "latency_s": [r["latency_s"] for r in rows], "per_rank": per_rank,
        "comm_bytes_per_round": (per_rank[0]["bytes_gathered"] / per_rank[0]["rounds"]) if per_rank[0]["rounds"] else 0,
        "config": {k: getattr(config, k) for k in ("policy", "strategy", "strategy_args", "cache", "gen_length", "steps")},
        "outputs": [{k: r[k] for k in ("index", "text", "token_ids", "nfe", "draft_rows", "token_forwards")}
                    for r in rows],
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "throughput.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{summary['mode']} x{summary['world_size']}: {len(rows)} requests, {tokens} tokens, "
          f"{wall:.2f} s, {summary['tokens_per_s']:.1f} tokens/s, TPF {summary['tpf']:.2f}")


def register(sub) -> None:
    from dllm.cli_options import add_generation_options, add_model_options

    p = sub.add_parser("throughput", help="multi-process throughput (run under torchrun)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_model_options(p)
    add_generation_options(p)
    p.add_argument("--prompts", required=True, help="JSONL ({prompt}|{messages}) or text file, one per line")
    p.add_argument("--branch-parallel", action="store_true", help="spread LoPA/FreeDave candidates over ranks")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--raw", action="store_true", help="do not apply the chat template")
    p.add_argument("--timeout", type=float, default=120.0, help="collective timeout in seconds")
    p.add_argument("--out", required=True)
    p.set_defaults(func=run)
