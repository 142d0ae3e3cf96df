"""The measurements of the GPU check on one model: forward time per cache mode against the
roofline, engine overhead per step, tokens/s and NFE per decoding method.

Each measurement is one real decode through ``dllm.engine.decoding.decode`` (the path users run) with
its forwards timed by ``ForwardTimer``; nothing here reimplements a step. Prompts are random
token ids (no mask or end-of-text id), all of one length, and rows never stop early
(``stop_at_eos=False``), so every row generates ``gen_length`` tokens and tokens/s counts them all.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from dllm.bench.device_peaks import DevicePeak
from dllm.bench.forward_timer import ForwardRecord, ForwardTimer
from dllm.bench.roofline import forward_cost
from dllm.engine.config import GenerationConfig
from dllm.engine.decoding import decode


@dataclass(frozen=True, slots=True)
class Method:
    """A named decoding setup: GenerationConfig fields other than the lengths."""

    name: str
    fields: dict[str, Any] = field(default_factory=dict)
    tokens_per_step: int | None = None  # fixed-step methods: steps = gen_length / this


def cache_methods(block_length: int) -> list[Method]:
    """One forward-timing setup per cache mode, LLaDA top-k at half a block per step (two
    steps per block, so each block has its refresh and one window forward); sub-block: dual
    with quarter-block sub-blocks."""
    half = max(1, block_length // 2)
    sub = max(1, block_length // 4)
    return [Method("none", {"cache": "none"}, half), Method("prefix", {"cache": "prefix"}, half),
            Method("dual", {"cache": "dual"}, half),
            Method(f"dual+sub{sub}", {"cache": "dual", "sub_block_length": sub}, max(1, sub // 2))]


def decoding_methods() -> list[Method]:
    """The decoding methods whose tokens/s the check reports, all with the dual cache."""
    threshold = {"policy": "threshold", "policy_args": {"tau": 0.9}, "cache": "dual"}
    return [Method("top-k (4/step)", {"policy": "low_confidence", "cache": "dual"}, 4),
            Method("threshold 0.9", threshold),
            Method("FreeDave K=4", {**threshold, "strategy": "freedave", "strategy_args": {"num_drafts": 4}}),
            Method("LoPA k=2", {**threshold, "strategy": "lopa", "strategy_args": {"branches": 2}})]


@dataclass(frozen=True, slots=True)
class Shape:
    batch: int
    prompt_length: int
    gen_length: int
    block_length: int


def random_prompts(model, shape: Shape, seed: int = 0) -> list[list[int]]:
    """``batch`` prompts of random ids, none of them the mask or an end-of-text id."""
    vocab = model.config.vocab_size
    special = torch.tensor([model.mask_token_id, *model.eos_token_ids])
    ids = torch.randint(0, vocab, (shape.batch, shape.prompt_length), generator=torch.Generator().manual_seed(seed))
    ids = torch.where(torch.isin(ids, special), (ids + 1) % vocab, ids)
    ids = torch.where(torch.isin(ids, special), (ids + 1) % vocab, ids)  # two specials in a row
    return ids.tolist()


def make_config(method: Method, shape: Shape, extra: dict[str, Any]) -> GenerationConfig:
    fields = {**method.fields, **extra}
    steps = None
    if method.tokens_per_step is not None:
        windows = shape.gen_length // (fields.get("sub_block_length") or shape.block_length)
        steps = max(windows, shape.gen_length // method.tokens_per_step)
        steps -= steps % windows
    return GenerationConfig(gen_length=shape.gen_length, block_length=shape.block_length, steps=steps,
                            stop_at_eos=False, **fields)


def _groups(records: list[ForwardRecord]) -> dict[tuple[int, int, int], list[float]]:
    groups: dict[tuple[int, int, int], list[float]] = {}
    for r in records:
        groups.setdefault((r.rows, r.queries, r.keys), []).append(r.seconds)
    return groups


def run_decode(model, method: Method, shape: Shape, peak: DevicePeak, extra: dict[str, Any]) -> dict[str, Any]:
    """One timed decode; a row of numbers (or of the error that stopped it, e.g. out of memory)."""
    row: dict[str, Any] = {"method": method.name, "batch": shape.batch, "prompt_length": shape.prompt_length,
                           "gen_length": shape.gen_length, "block_length": shape.block_length}
    config = make_config(method, shape, extra)
    prompts = random_prompts(model, shape)
    timer = ForwardTimer(model)
    cuda = timer.cuda
    try:
        if cuda:
            torch.cuda.reset_peak_memory_stats(timer.device)
        with timer:
            result = decode(model, prompts, config)
        records = timer.records()
    except RuntimeError as err:  # out of memory, or a failure the report must show, not hide
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        first_line = (str(err).splitlines() or [""])[0]
        kind = "out of memory" if isinstance(err, torch.cuda.OutOfMemoryError) else type(err).__name__
        return {**row, "error": f"{kind}: {first_line}"}
    wall = result.wall_time
    forward_total = sum(r.seconds for r in records)
    nfe = result.nfe.float().mean().item()
    tokens = shape.batch * shape.gen_length
    row.update(wall_s=wall, forwards=len(records), forward_s=forward_total, nfe=nfe,
               tpf=shape.gen_length / nfe if nfe else None, tokens_per_s=tokens / wall if wall > 0 else None,
               overhead_s_per_step=(wall - forward_total) / max(len(records), 1),
               overhead_share=(wall - forward_total) / wall if wall > 0 else None,
               planned_peak_bytes=result.memory["total_bytes"],  # dllm.engine.memory's upper bound
               peak_memory_bytes=torch.cuda.max_memory_allocated(timer.device) if cuda else None)
    # window forwards (queries < keys: a cached step) are the steady state; uncached decodes
    # have only canvas forwards. Block-start refreshes (queries == keys) are reported apart.
    window = [r for r in records if r.queries < r.keys] or records
    refresh = [r for r in records if r.queries == r.keys] if window is not records else []
    costs = [forward_cost(model, rows=r.rows, queries=r.queries, keys=r.keys) for r in window]
    measured = sum(r.seconds for r in window)
    memory = [c.memory_seconds(peak) for c in costs]
    ceiling = [c.ceiling_seconds(peak) for c in costs]
    typical = window[len(window) // 2]
    row["forward"] = {"rows": typical.rows, "queries": typical.queries, "keys": typical.keys, "count": len(window),
                      "median_s": statistics.median(r.seconds for r in window),
                      "refresh_median_s": statistics.median(r.seconds for r in refresh) if refresh else None,
                      "bytes": statistics.median(c.bytes_read for c in costs),
                      "flops": statistics.median(c.flops for c in costs),
                      "memory_ceiling_s": statistics.median(memory) if None not in memory else None,
                      "ceiling_s": statistics.median(ceiling) if None not in ceiling else None,
                      "x_ceiling": measured / sum(ceiling) if None not in ceiling and sum(ceiling) > 0 else None,
                      "bandwidth_share": sum(memory) / measured if None not in memory and measured > 0 else None}
    row["forward_shapes"] = [{"rows": r, "queries": q, "keys": k, "count": len(t), "median_s": statistics.median(t)}
                             for (r, q, k), t in sorted(_groups(records).items())]
    return row


def warm_up(model, shape: Shape, methods: list[Method], extra: dict[str, Any], peak: DevicePeak) -> float:
    """Run each method once on a short answer (kernel compilation, library autotuning)."""
    start = time.perf_counter()
    short = replace(shape, gen_length=2 * shape.block_length)
    for method in methods:
        run_decode(model, method, short, peak, extra)
    return time.perf_counter() - start
