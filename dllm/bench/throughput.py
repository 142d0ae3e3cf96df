"""``dllm bench throughput``: multi-process runs under torchrun.

Data parallel (default): prompts are sharded over ranks (rank r takes prompts r, r+W, ...),
each rank decodes its share in batches, rank 0 gathers the outputs back in input order.
``--branch-parallel``: every rank decodes every prompt and LoPA's / FreeDave's candidates are
spread over ranks (dllm.parallel.branch_parallel). ``--tensor-parallel T``: each copy of the model
is split over T ranks (W / T copies, ``dllm.parallel.groups``); the copies take the place of the
ranks above (prompts or candidates are dealt to copies), and a copy's tensor rank 0 writes its rows.

Input is checked before any decoding: options, ``--out`` and the prompts file on every rank
before the process group forms, each prompt's length against the model once it is loaded (an
error names the file's line). Each rank appends its rows to ``OUT/outputs.rankR.jsonl`` batch by
batch (branch parallel: rank 0 only); rank 0 writes the summary ``OUT/throughput.json`` at the
end. A rank that raises logs its error and exits non-zero; torchrun then stops the others, so
no partial summary is ever written.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

from dllm.cli.output import LOGGER_NAME

log = logging.getLogger(LOGGER_NAME)


def _decode_share(model, ids: list[list[int]], prompts: list, indices: list[int], config, batch_size: int,
                  stream: Path | None, bar) -> list[dict]:
    """Decode ``indices`` in batches; each batch's rows are appended to ``stream`` as they are made."""
    out = []
    for start in range(0, len(indices), batch_size):
        idx = indices[start : start + batch_size]
        t = time.perf_counter()
        gen = model.generate_ids([ids[i] for i in idx], config)
        latency = time.perf_counter() - t
        batch = [{"index": i, "line": prompts[i].line, "text": text, "token_ids": tok, "latency_s": latency, **st}
                 for i, text, tok, st in zip(idx, gen.texts, gen.token_ids, gen.stats)]
        if stream is not None:
            with stream.open("a") as f:
                f.write("".join(json.dumps(r) + "\n" for r in batch))
        out += batch
        bar.update(len(batch))
    return out


def run(args: argparse.Namespace) -> int:
    import torch.distributed as dist

    from dllm.cli.options import generation_config, length_flag, load_from_args, refuse_idle_pipeline_options
    from dllm.cli.output import check_output_dir, progress_bar
    from dllm.cli.prompts import check_prompt_lengths, read_prompts, refuse_messages_under_raw
    from dllm.parallel.dist import leave_together
    from dllm.parallel.groups import join_groups  # refuses a process count the size does not fit

    # every input check that needs no model, on every rank, before the process group forms
    config = generation_config(args)
    refuse_idle_pipeline_options(args)
    out_dir = check_output_dir(args.out)
    if args.prompts == "-" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ValueError("--prompts-file - (stdin) cannot be shared by torchrun's processes; pass a prompts file")
    prompts = read_prompts(args.prompts)
    if args.raw:
        refuse_messages_under_raw(prompts)
    layout, ctx = join_groups(args.tensor_parallel, args.device, timeout_s=args.timeout)
    try:
        if os.environ.get("DLLM_FAIL_RANK") == str(ctx.rank):  # fault injection for the failure test
            raise RuntimeError(f"injected failure on rank {ctx.rank}")
        model = load_from_args(args, device=str(ctx.device))
        chat = False if args.raw else None
        ids = check_prompt_lengths(model, prompts, config, chat, length_flag(args))  # all of them: errors name the file's line
        evaluator = None
        if args.branch_parallel:
            from dllm.parallel.branch_parallel import enable_branch_parallel

            evaluator = enable_branch_parallel(layout.group_index, layout.groups, layout.peer_group)
            indices = list(range(len(prompts)))
            writes = ctx.is_main  # every rank decodes everything; rank 0's copy is the answer
        else:  # each copy of the model (one rank, or a tensor group) takes every groups-th prompt
            indices = list(range(layout.group_index, len(prompts), layout.groups))
            writes = layout.leads
        out_dir.mkdir(parents=True, exist_ok=True)
        if ctx.is_main:
            (out_dir / "throughput.json").unlink(missing_ok=True)  # never leave an older run's summary
        stream = out_dir / f"outputs.rank{ctx.rank}.jsonl" if writes else None
        if stream is not None:
            stream.write_text("")
        log.debug("rank %d: %d of %d prompt(s) in batches of %d", ctx.rank, len(indices), len(prompts), args.batch_size)
        bar = progress_bar(len(indices), desc=f"rank {ctx.rank}", quiet=args.quiet, enabled=ctx.is_main)
        start = time.perf_counter()
        rows = _decode_share(model, ids, prompts, indices, config, args.batch_size, stream, bar)
        wall = time.perf_counter() - start
        bar.close()
        mine = {"rank": ctx.rank, "group": layout.group_index, "wall_s": wall, "requests": len(rows),
                "tokens": sum(r["tokens"] for r in rows),
                "bytes_gathered": evaluator.bytes_gathered if evaluator else 0,
                "rounds": evaluator.rounds if evaluator else 0}
        everything = [None] * ctx.world_size
        if ctx.world_size > 1:
            dist.all_gather_object(everything, {"rows": rows if writes else [], "rank_stats": mine})
        else:
            everything = [{"rows": rows, "rank_stats": mine}]
    except Exception as err:  # noqa: BLE001  one clear line per failing rank, then a hard exit
        if ctx.world_size == 1:
            raise  # no other rank to release: an ordinary error (``dllm: error: ...`` for bad input)
        bad_input = isinstance(err, (ValueError, FileNotFoundError))
        log.error("rank %d failed: %s", ctx.rank, err, exc_info=not bad_input)
        for handler in log.handlers:
            handler.flush()
        os._exit(2 if bad_input else 1)
    if ctx.is_main:
        report(everything, args, config, out_dir)
    leave_together()
    return 0


def report(everything: list[dict], args: argparse.Namespace, config, out: Path) -> None:
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
        "world_size": len(per_rank), "tensor_parallel": args.tensor_parallel,
        "groups": len(per_rank) // args.tensor_parallel, "requests": len(rows), "tokens": tokens, "wall_s": wall,
        "tokens_per_s": tokens / wall if wall else None, "nfe_per_request": nfe / len(rows),
        "tpf": tokens / nfe if nfe else None,
        "latency_s": [r["latency_s"] for r in rows], "per_rank": per_rank,
        "comm_bytes_per_round": (per_rank[0]["bytes_gathered"] / per_rank[0]["rounds"]) if per_rank[0]["rounds"] else 0,
        "config": {k: getattr(config, k) for k in ("policy", "strategy", "strategy_args", "cache", "gen_length", "steps")},
        "outputs": [{k: r[k] for k in ("index", "line", "text", "token_ids", "nfe", "draft_rows", "token_forwards")}
                    for r in rows],
    }
    (out / "throughput.json").write_text(json.dumps(summary, indent=1) + "\n")
    tp = f" (tensor parallel {args.tensor_parallel})" if args.tensor_parallel > 1 else ""
    print(f"{summary['mode']} x{summary['groups']}{tp}: {len(rows)} requests, {tokens} tokens, "
          f"{wall:.2f} s, {summary['tokens_per_s']:.1f} tokens/s, TPF {summary['tpf']:.2f}")


def register(sub) -> None:
    from dllm.cli.options import (
        add_generation_options, add_model_options, add_tensor_parallel_option, positive_float, positive_int,
    )

    p = sub.add_parser("throughput", help="multi-process throughput (run under torchrun)")
    add_model_options(p)
    add_tensor_parallel_option(p, copies=True)
    add_generation_options(p)
    p.add_argument("--prompts-file", "--prompts", dest="prompts", required=True, metavar="FILE",
                   help='prompts file, as generate\'s: one per text line, or .jsonl lines with "prompt" or '
                        '"messages" (--prompts is the older name)')
    p.add_argument("--branch-parallel", action="store_true", help="spread LoPA/FreeDave candidates over ranks")
    p.add_argument("--batch-size", type=positive_int, default=8, help="prompts decoded together")
    p.add_argument("--raw", action="store_true", help="do not apply the chat template")
    p.add_argument("--timeout", type=positive_float, default=120.0, help="collective timeout in seconds")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="output directory: throughput.json, outputs.rankR.jsonl (created if missing)")
    p.set_defaults(func=run)
