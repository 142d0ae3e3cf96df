"""The GPU check's batch-invariance section (issue 39): does a row's logits depend on its batch?

One random model, a ragged batch of left-padded prompts plus a block of masks, one uncached
canvas forward: each row's logits are compared, bit for bit, with the same row's batch-1 forward,
first as built (cuBLAS, torch reductions) and then after ``make_batch_invariant`` (the Triton
kernels of ``load(batch_invariant=True)``), with the median forward time of each and their ratio
from the same run, and (``step_batches``) the decode step of each mode side by side with the dual
cache and uncached, eager and replayed from CUDA graphs (issue 39 item 3: the cost of the mode,
composed with the graphs). What the option does not cover yet (``dllm.models.batch_invariant``) can
still make rows differ; the section reports what it measures. On the CPU it runs the same steps through the kernels' torch
references (the suite's dry run), or through the Triton kernels themselves under
``DLLM_KERNELS=triton TRITON_INTERPRET=1`` (slow: seconds a forward on the tiny shapes); only a
CUDA result says anything about the GPU's timing.

    python -m dllm.bench.batch_invariance --model tiny-llada --device cpu
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from dllm.engine.config import GenerationConfig
from dllm.engine.decoding import decode
from dllm.kernels import kernel_backend
from dllm.models.batch_invariant import make_batch_invariant
from dllm.runner import graphs
from dllm.runner.canvas import build_canvas
from dllm.runner.model_runner import ModelRunner

REPEATS = 5


def _prompts(rows: int, max_len: int, vocab: int, mask_id: int, seed: int) -> list[list[int]]:
    """``rows`` prompts of lengths spread over [1, max_len] (ragged), ids clear of the mask id."""
    g = torch.Generator().manual_seed(seed)
    lengths = [max(1, round(max_len * (i + 1) / rows)) for i in range(rows)]
    ids = [torch.randint(0, vocab, (n,), generator=g) for n in lengths]
    return [torch.where(t == mask_id, (t + 1) % vocab, t).tolist() for t in ids]


def _forward(model, prompts: list[list[int]], gen_length: int) -> torch.Tensor:
    """Canvas logits (B, L, V) of one uncached forward over left-padded prompts + masks."""
    canvas = build_canvas(prompts, gen_length=gen_length, mask_id=model.mask_token_id,
                          pad_id=model.config.pad_token_id, device=model.device)
    with torch.inference_mode():
        return ModelRunner(model, canvas).forward(canvas.tokens, 0)


def _timed(model, prompts, gen_length: int) -> float:
    """Median seconds of REPEATS batch forwards (synchronised on CUDA)."""
    cuda = model.device.type == "cuda"
    times = []
    for _ in range(REPEATS):
        if cuda:
            torch.cuda.synchronize(model.device)
        start = time.perf_counter()
        _forward(model, prompts, gen_length)
        if cuda:
            torch.cuda.synchronize(model.device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _compare(model, prompts, gen_length: int) -> dict:
    """Rows whose batch logits equal their batch-1 logits bit for bit, the largest difference,
    and the median batch forward time."""
    batch = _forward(model, prompts, gen_length)
    equal, worst = 0, 0.0
    for row, prompt in enumerate(prompts):
        alone = _forward(model, [prompt], gen_length)[0]  # (len(prompt) + gen, V)
        mine = batch[row, batch.shape[1] - alone.shape[0]:]  # the row's own (unpadded) positions
        equal += int(torch.equal(mine, alone))
        worst = max(worst, (mine.float() - alone.float()).abs().max().item())
    return {"rows_equal": equal, "max_abs_diff": worst, "median_forward_s": _timed(model, prompts, gen_length)}


def _timings(model, batches: dict[int, list[list[int]]], gen_length: int) -> dict[int, float]:
    """Median forward seconds per batch size (one warm-up forward each)."""
    out = {}
    for b, prompts in batches.items():
        _forward(model, prompts, gen_length)
        out[b] = _timed(model, prompts, gen_length)
    return out


STEP_CACHES = ("dual", "none")  # issue 39's step table: the dual cache and uncached


def _step_modes(device) -> list[str]:
    """Forward modes whose decode step is timed: eager, and CUDA graphs where they run."""
    available = graphs.BACKEND is not graphs.CudaGraph or graphs.graphs_available(device) is None
    return ["eager", "graphs"] if available else ["eager"]


def _step_s(model, prompts: list[list[int]], gen_length: int, cache: str, mode: str) -> float:
    """Seconds per forward of a warm decode (the first decode warms up and captures): one block of
    ``gen_length``, 4 tokens per step, synchronised on CUDA."""
    config = GenerationConfig(gen_length=gen_length, block_length=gen_length, steps=max(1, gen_length // 4),
                              cache=cache, stop_at_eos=False, cuda_graphs=mode == "graphs")
    decode(model, prompts, config)
    cuda = model.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(model.device)
    start = time.perf_counter()
    result = decode(model, prompts, config)
    if cuda:
        torch.cuda.synchronize(model.device)
    return (time.perf_counter() - start) / max(int(result.nfe.max()), 1)


def _steps(model, batches: dict[int, list[list[int]]], gen_length: int) -> dict[tuple, float]:
    """Step seconds per (batch, cache, forward mode)."""
    return {(b, cache, mode): _step_s(model, prompts, gen_length, cache, mode)
            for b, prompts in batches.items() for cache in STEP_CACHES for mode in _step_modes(model.device)}


def batch_invariance_section(model, *, rows: int = 8, prompt_length: int = 64, gen_length: int = 32,
                             seed: int = 0, timing_batches: tuple[int, ...] = (),
                             step_batches: tuple[int, ...] = ()) -> dict:
    """Measure ``model`` as built, then swap its modules (in place: the model is spent after)
    and measure again. ``timing_batches``: batch sizes whose ragged canvas forward is also timed
    in both modes (the cost of the mode, side by side); ``step_batches``: batch sizes whose decode
    step (dual cache and uncached, eager and CUDA graphs where they run) is timed in both modes.
    Returns the JSON the GPU check writes."""
    vocab, mask = model.config.vocab_size, model.mask_token_id
    prompts = _prompts(rows, prompt_length, vocab, mask, seed)
    batches = {b: _prompts(b, prompt_length, vocab, mask, seed + b) for b in timing_batches}
    step_prompts = {b: _prompts(b, prompt_length, vocab, mask, seed + 1000 + b) for b in step_batches}
    _forward(model, prompts, gen_length)  # warm-up (kernel selection, allocator)
    default = _compare(model, prompts, gen_length)
    default_times = _timings(model, batches, gen_length)
    default_steps = _steps(model, step_prompts, gen_length)
    counts = make_batch_invariant(model)
    graphs.forget(model)  # graphs captured before the swap would replay the old kernels
    _forward(model, prompts, gen_length)  # warm-up: the Triton kernels compile here on CUDA
    invariant = _compare(model, prompts, gen_length)
    invariant_times = _timings(model, batches, gen_length)
    invariant_steps = _steps(model, step_prompts, gen_length)
    timing = [{"batch": b, "default_s": default_times[b], "batch_invariant_s": invariant_times[b],
               "ratio": invariant_times[b] / default_times[b]} for b in timing_batches]
    steps = [{"batch": b, "cache": cache, "mode": mode, "default_s": s, "batch_invariant_s": invariant_steps[b, cache, mode],
              "ratio": invariant_steps[b, cache, mode] / s} for (b, cache, mode), s in default_steps.items()]
    return {"device": str(model.device), "kernel_backend": kernel_backend(model.device), "rows": rows,
            "prompt_lengths": [len(p) for p in prompts], "gen_length": gen_length, "replaced": counts,
            "default": default, "batch_invariant": invariant,
            "forward_ratio": invariant["median_forward_s"] / default["median_forward_s"], "timing": timing,
            "steps": steps}


def main(argv: list[str] | None = None) -> int:
    """Build a random model, run the section, print its table."""
    from dllm.bench.gpu_report import invariance_table
    from dllm.bench.random_models import SHAPES, build_random_model
    from dllm.models.placement import resolve_device, resolve_dtype

    p = argparse.ArgumentParser(prog="python -m dllm.bench.batch_invariance", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="tiny-llada", choices=sorted(SHAPES), help="random-weight shape")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--prompt-length", type=int, default=8, help="the longest prompt")
    p.add_argument("--gen-length", type=int, default=8, help="masks after each prompt")
    p.add_argument("--timing-batches", type=int, nargs="*", default=[], help="batch sizes timed in both modes")
    p.add_argument("--step-batches", type=int, nargs="*", default=[],
                   help="batch sizes whose decode step (dual, none; eager, CUDA graphs on CUDA) is timed in both modes")
    args = p.parse_args(argv)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device=device)
    model = build_random_model(args.model, device=device, dtype=dtype)
    result = batch_invariance_section(model, rows=args.rows, prompt_length=args.prompt_length,
                                      gen_length=args.gen_length, timing_batches=tuple(args.timing_batches),
                                      step_batches=tuple(args.step_batches))
    print("\n".join(invariance_table(f"{args.model} ({str(dtype).removeprefix('torch.')})", result)))
    return 0


__all__ = ["batch_invariance_section", "main"]

if __name__ == "__main__":
    sys.exit(main())
