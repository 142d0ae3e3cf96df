"""Microbenchmark of the per-step confidence-statistics kernel against its torch reference.

    python bench/kernels_microbench.py --out bench/results/kernels_microbench.json

Per shape (rows x vocab, dtype): time of the Triton kernel and of the torch reference, bytes the
step must read (rows * vocab * element size; the kernel reads them once, writes ~28 B per row),
and the achieved read bandwidth. On CUDA, times are CUDA-event medians and a device-to-device
copy (``clone`` of a large buffer, read + write bytes) gives the bandwidth to compare with.

Without CUDA the kernel only runs under the Triton interpreter (``TRITON_INTERPRET=1``): its
numbers then measure the interpreter, NOT the kernel's speed, and the JSON says so; without the
interpreter only the reference is timed. Use ``--rows 2 --vocab 1000 --iters 2`` for a CPU smoke
run.
"""
from __future__ import annotations

import argparse
import importlib
import json
import platform
import statistics
import time
from pathlib import Path

import torch

cs = importlib.import_module("dllm.kernels.confidence_stats")

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _time(fn, iters: int, warmup: int, cuda: bool) -> float:
    """Median seconds per call."""
    for _ in range(warmup):
        fn()
    times = []
    if cuda:
        torch.cuda.synchronize()
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
    else:
        for _ in range(iters):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def copy_bandwidth(device: torch.device, mib: int, iters: int) -> dict:
    """Device-to-device copy: clone of a ``mib`` MiB buffer; bytes = read + write."""
    buf = torch.empty(mib * 2**20 // 4, dtype=torch.float32, device=device).fill_(1.0)
    sec = _time(lambda: buf.clone(), iters, 3, device.type == "cuda")
    moved = 2 * buf.numel() * buf.element_size()
    return {"buffer_mib": mib, "seconds": sec, "bytes_moved": moved, "gb_per_s": moved / sec / 1e9}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON file to write")
    ap.add_argument("--rows", type=int, nargs="+", default=[32, 256])
    ap.add_argument("--vocab", type=int, nargs="+", default=[32000, 126464])
    ap.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=["fp32", "bf16"])
    ap.add_argument("--temperature", type=float, nargs="+", default=[0.0],
                    help="0 = argmax; > 0 adds the hashed Gumbel noise inside the kernel")
    ap.add_argument("--block-v", type=int, nargs="+", default=[0], help="kernel chunk widths (0 = default)")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--copy-mib", type=int, default=1024)
    args = ap.parse_args()

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if cuda:
        mode, note = "cuda", "CUDA-event medians; bandwidth = bytes read / kernel time"
    elif cs.triton_interpreted():
        mode = "interpreter"
        note = ("TRITON INTERPRETER ON CPU: kernel times measure the Python interpreter of Triton, NOT the "
                "kernel's speed; only the correctness columns and the reference's CPU time mean anything")
    else:
        mode, note = "cpu-reference-only", "no CUDA and no TRITON_INTERPRET=1: only the torch reference is timed"
    print(f"[{mode}] {note}", flush=True)
    tag = "" if cuda else f"[{mode}] "  # every CPU line carries its caveat
    run_kernel = cs.triton_available() and mode != "cpu-reference-only"
    excluded = torch.tensor([126336 % 32000], device=device)  # one excluded id, as the engine's mask token

    rows = []
    g = torch.Generator(device=device).manual_seed(0)
    for dname in args.dtypes:
        for R in args.rows:
            for V in args.vocab:
                x = (torch.randn(R, V, generator=g, device=device) * 4).to(DTYPES[dname])
                read = R * V * x.element_size()
                for T in args.temperature:
                    kw = {"temperature": T, "seed": 1, "offset": 0, "excluded_ids": excluded % V}
                    ref_s = _time(lambda: cs.confidence_stats_torch(x, **kw), args.iters, args.warmup, cuda)
                    ref = cs.confidence_stats_torch(x, **kw)
                    for block in args.block_v if run_kernel else [None]:
                        entry = {"rows": R, "vocab": V, "dtype": dname, "temperature": T, "bytes_read": read,
                                 "torch_seconds": ref_s, "torch_gb_per_s": read / ref_s / 1e9}
                        if block is not None:
                            fn = lambda: cs.confidence_stats_triton(x, block_v=block or None, **kw)  # noqa: E731
                            k_s = _time(fn, args.iters, args.warmup, cuda)
                            got = fn()
                            entry.update({
                                "block_v": block or "default", "kernel_seconds": k_s, "kernel_gb_per_s": read / k_s / 1e9,
                                "speedup_vs_torch": ref_s / k_s,
                                "tokens_equal": bool(torch.equal(got.token, ref.token)),
                                "max_abs_diff": max((getattr(got, f) - getattr(ref, f)).abs().max().item()
                                                    for f in ("prob", "margin_prob", "entropy")),
                            })
                        rows.append(entry)
                        msg = f"{tag}{dname} {R}x{V} T={T}: torch {ref_s * 1e3:.3f} ms ({entry['torch_gb_per_s']:.1f} GB/s)"
                        if "kernel_seconds" in entry:
                            msg += (f" | kernel[{entry['block_v']}] {entry['kernel_seconds'] * 1e3:.3f} ms "
                                    f"({entry['kernel_gb_per_s']:.1f} GB/s, x{entry['speedup_vs_torch']:.2f}) "
                                    f"tokens_equal={entry['tokens_equal']} max_abs_diff={entry['max_abs_diff']:.2e}")
                        print(msg, flush=True)

    result = {"mode": mode, "note": note, "is_speed": mode == "cuda",
              "device": torch.cuda.get_device_name() if cuda else f"{platform.machine()} CPU, {torch.get_num_threads()} threads",
              "torch": torch.__version__, "triton": _triton_version(), "iters": args.iters, "rows": rows}
    if cuda:
        result["copy"] = copy_bandwidth(device, args.copy_mib, args.iters)
        print(f"device-to-device copy: {result['copy']['gb_per_s']:.1f} GB/s (read + write)", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}", flush=True)


def _triton_version() -> str | None:
    if not cs.triton_available():
        return None
    import triton

    return triton.__version__


if __name__ == "__main__":
    main()
