"""The GPU check's forward-mode stage (issue 38): per cache (none, prefix, dual), the decode step
in each forward mode (eager, ``compile=True``, CUDA graphs) against the weight-read floor, and
the time to the first token with compilation or capture included.

Each (cache, mode) runs one cold decode, stepped round by round so the first round's end is the
time to the first token (whatever compiling or capturing it needed), then ``reps`` warm decodes
through ``gpu_measure.run_decode`` (forwards timed by ``ForwardTimer``, replays included). The
step is a warm decode's wall time per forward, engine included; the floor is the window
forward's bytes (weights once, plus its K/V) at the device's peak bandwidth, the ceiling the
larger of that and its FLOPs at peak throughput. The cold decode's tokens are compared with the
eager one's (bf16: compiled and replayed kernels may round differently). Modes run in the order
eager, graphs, compile, caches dual, prefix, none within each; graphs and compiled graphs are
kept per model, so a later cache's first token pays only for the shapes it adds (dual's refresh
forward is prefix's too). A mode this
build lacks, or one that fails, is a row with its reason; the other rows stand.
"""
from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from dllm.bench import gpu_measure as gm
from dllm.bench.device_peaks import DevicePeak
from dllm.engine.config import GenerationConfig
from dllm.engine.decoding import Decoding, RowStart

CACHES = ("dual", "prefix", "none")  # the headline first: a budget cut drops the last
MODES = ("eager", "graphs", "compile")
TOKENS_PER_STEP = 4  # LLaDA top-k, as the table (4 tokens per step)
NOT_IN_BUILD = "not available in this build"
# Seconds a row may take at LLaDA-8B on one H100 / H200 (cold decode with its compile or capture,
# then the warm ones): a row is started only while this much is left before the deadline.
# Compiling took 55 s (none) and 109 s (dual, refresh and window) on an H200 (issue 38).
ROW_S = {"eager": 15.0, "graphs": 25.0, "compile": 90.0}


def mode_fields(mode: str, device: torch.device) -> dict[str, Any] | str:
    """The GenerationConfig fields of a forward mode, or why this build or device cannot run it."""
    if mode == "eager":
        return {}
    if mode == "compile":
        from dllm.runner.compiled import compile_available

        reason = compile_available()
        return {"compile": True} if reason is None else reason
    if mode == "graphs":
        if not hasattr(GenerationConfig(), "cuda_graphs"):
            return NOT_IN_BUILD
        from dllm.runner import graphs

        reason = graphs.graphs_available(device) if graphs.BACKEND is graphs.CudaGraph else None
        return reason or {"cuda_graphs": True}
    raise ValueError(f"unknown forward mode {mode!r}; known: {MODES}")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cold_decode(model, prompts: list[list[int]], config: GenerationConfig) -> dict[str, Any]:
    """One decode stepped round by round: seconds to the first round's end (its first committed
    tokens), to the end, and the answer tokens (B, gen_length)."""
    device = model.device
    _sync(device)
    start = time.perf_counter()
    rows = [RowStart(prefix=list(p), gen_length=config.gen_length, seed=config.seed) for p in prompts]
    decoding = Decoding(model, rows, config)
    decoding.step()
    _sync(device)
    first = time.perf_counter() - start
    while not decoding.done:
        decoding.step()
    result = decoding.result()
    _sync(device)
    return {"first_token_s": first, "first_decode_s": time.perf_counter() - start, "answer": result.answer.cpu()}


def measure_modes(model, shape: gm.Shape, peak: DevicePeak, extra: dict[str, Any], *, reps: int = 3,
                  caches: tuple[str, ...] = CACHES, modes: tuple[str, ...] = MODES,
                  deadline: float | None = None) -> list[dict[str, Any]]:
    """One row per (mode, cache): time to the first token, warm step time, floor, ratios, token
    agreement with eager; or the reason the row has no numbers. ``deadline``: a perf_counter
    time; a row that may not end before it (``ROW_S``) is skipped, named as such."""
    prompts = gm.random_prompts(model, shape)
    eager_answers: dict[str, torch.Tensor] = {}
    rows = []
    for mode in modes:
        fields = mode_fields(mode, model.device)
        for cache in caches:
            row: dict[str, Any] = {"mode": mode, "cache": cache, "batch": shape.batch,
                                   "prompt_length": shape.prompt_length, "gen_length": shape.gen_length,
                                   "block_length": shape.block_length}
            if isinstance(fields, str):
                rows.append({**row, "unavailable": fields})
                continue
            if deadline is not None and time.perf_counter() + ROW_S[mode] > deadline:
                rows.append({**row, "unavailable": "skipped: the stage's time budget was spent"})
                continue
            method = gm.Method(f"{cache} {mode}", {"cache": cache, "policy": "low_confidence", **fields},
                               TOKENS_PER_STEP)
            try:
                rows.append({**row, **_measure(model, method, shape, prompts, peak, extra, reps, eager_answers,
                                               cache, mode)})
            except Exception as err:  # recorded, and the other rows go on (a failed compile included)
                if model.device.type == "cuda":
                    torch.cuda.empty_cache()
                first_line = (str(err).splitlines() or [""])[0][:300]
                rows.append({**row, "error": f"{type(err).__name__}: {first_line}"})
        if mode == "graphs":  # the graphs' K/V slots, pool and logits buffers are not needed by later rows
            from dllm.runner import graphs

            graphs.forget(model)
            if model.device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def _measure(model, method: gm.Method, shape: gm.Shape, prompts, peak: DevicePeak, extra: dict[str, Any],
             reps: int, eager_answers: dict[str, torch.Tensor], cache: str, mode: str) -> dict[str, Any]:
    cold = cold_decode(model, prompts, gm.make_config(method, shape, extra))
    answer = cold.pop("answer")
    if mode == "eager":
        eager_answers[cache] = answer
    reference = eager_answers.get(cache)
    cold["tokens_equal_eager"] = None if reference is None else float((answer == reference).float().mean())
    warm = [gm.run_decode(model, method, shape, peak, extra) for _ in range(max(1, reps))]
    failed = [w for w in warm if "error" in w]
    if failed:
        raise RuntimeError(failed[0]["error"])
    steps = sorted(w["wall_s"] / max(w["forwards"], 1) for w in warm)
    best = min(warm, key=lambda w: w["wall_s"])
    f = best["forward"]
    step = statistics.median(steps)
    floor, ceiling = f["memory_ceiling_s"], f["ceiling_s"]
    out = {**cold, "step_s": step, "step_spread_s": [steps[0], steps[-1]], "forward_median_s": f["median_s"],
           "window": [f["rows"], f["queries"], f["keys"]], "forwards": best["forwards"], "nfe": best["nfe"],
           "tokens_per_s": statistics.median(w["tokens_per_s"] for w in warm),
           "floor_s": floor, "x_floor": step / floor if floor else None,
           "ceiling_s": ceiling, "x_ceiling": step / ceiling if ceiling else None,
           "overhead_share": best["overhead_share"]}
    if mode == "graphs":
        from dllm.runner.graphs import graph_stats

        out["graph_stats"] = graph_stats(model)
    return out
