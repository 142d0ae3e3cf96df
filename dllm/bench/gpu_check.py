"""``python -m dllm.bench.gpu_check`` (``bash bench/gpu_check.sh``): prove dllm on a CUDA machine.

1. checks that every module it needs imports (naming each missing one; never installs);
2. runs the test suite with the device-generic tests on the device (``DLLM_TEST_DEVICE``; the
   Triton kernel tests then run natively, bf16 and fp16 included);
3. builds random-weight models of real shapes directly on the device (LLaDA-8B, Dream-7B, a ~1B
   LLaDA; no checkpoint written) and measures, per batch size and answer length, one forward per
   cache mode against the device's roofline, the engine's overhead per step, and tokens/s with
   NFE for top-k, threshold 0.9, FreeDave and LoPA;
4. runs a ragged batch of 8 rows through the first model, as built and with
   ``batch_invariant=True``'s kernels, and reports how many rows' logits equal their batch-1
   forward bit for bit, and the two modes' forward times at each --batch-sizes
   (``dllm.bench.batch_invariance``; issue 39);
5. writes ``OUT/gpu_<device>/`` (JSON per model + ``results.md``) and prints the tables.

``--tiny --device cpu`` runs the same stages on seconds-sized models (the test suite does).
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from dllm.cli.options import HelpFormatter, parse_kv, positive_float, positive_int
from dllm.cli.output import LOGGER_NAME, check_output_dir, configure_logging

log = logging.getLogger(LOGGER_NAME)
REPO = Path(__file__).resolve().parents[2]
EXIT_USAGE, EXIT_FAILED, EXIT_BROKEN_PIPE = 2, 1, 128 + 13
FULL = {"batch_sizes": [1, 8, 32], "prompt_length": 256, "gen_lengths": [256, 1024], "block_length": 32}
TINY = {"batch_sizes": [1, 2], "prompt_length": 8, "gen_lengths": [16], "block_length": 8}


def build_parser() -> argparse.ArgumentParser:
    from dllm.bench.random_models import REAL_SHAPES, SHAPES
    from dllm.models.placement import DTYPE_CHOICES

    p = argparse.ArgumentParser(prog="python -m dllm.bench.gpu_check", formatter_class=HelpFormatter,
                                description="Prove dllm on a CUDA machine: the test suite on the GPU, then "
                                            "random-weight models of real shapes measured against the roofline.")
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cuda, cuda:N, or cpu")
    p.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES,
                   help="weights and activations; auto: bfloat16 on a GPU, float32 on the CPU")
    p.add_argument("--tiny", action="store_true",
                   help="seconds-sized models and shapes (a dry run of every stage; the suite runs it on CPU)")
    p.add_argument("--models", nargs="+", choices=sorted(SHAPES), default=None, metavar="SHAPE",
                   help=f"model shapes, any of {', '.join(sorted(SHAPES))} (default: {' '.join(REAL_SHAPES)}; with --tiny the tiny ones)")
    p.add_argument("--batch-sizes", nargs="+", type=positive_int, default=None,
                   help=f"default: {FULL['batch_sizes']} ({TINY['batch_sizes']} with --tiny)")
    p.add_argument("--prompt-length", type=positive_int, default=None,
                   help=f"prompt tokens (default: {FULL['prompt_length']}, {TINY['prompt_length']} with --tiny)")
    p.add_argument("--gen-lengths", nargs="+", type=positive_int, default=None,
                   help=f"answer lengths (default: {FULL['gen_lengths']}, {TINY['gen_lengths']} with --tiny)")
    p.add_argument("--block-length", type=positive_int, default=None,
                   help=f"default: {FULL['block_length']} ({TINY['block_length']} with --tiny)")
    p.add_argument("--config-arg", action="append", metavar="K=V",
                   help="a GenerationConfig field added to every measured decode, repeatable")
    p.add_argument("--peak-bandwidth-gbs", type=positive_float, default=None,
                   help="device memory bandwidth in GB/s (default: looked up from the device name)")
    p.add_argument("--peak-tflops", type=positive_float, default=None,
                   help="dense bf16 TFLOP/s (default: looked up from the device name)")
    p.add_argument("--no-tests", action="store_true", help="skip the test suite stage")
    p.add_argument("--no-batch-invariance", action="store_true",
                   help="skip the batch-invariance section (a ragged batch's rows against their batch-1 "
                        "forwards, default and batch_invariant=True, on the first model)")
    p.add_argument("--pytest-args", default="",
                   help="arguments of the test stage's pytest (default: none, the whole suite)")
    p.add_argument("--out", default=str(REPO / "bench" / "results"),
                   help="results root; the run writes OUT/gpu_<device name>/ (default: bench/results)")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors on stderr")
    return p


def device_name(device) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu {platform.machine()}".strip()


def _resolve(args: argparse.Namespace):
    """Device, dtype and sizes from the options, every check before any model work."""
    from dllm.bench.random_models import REAL_SHAPES, TINY_SHAPES, shape_config
    from dllm.engine.config import GenerationConfig
    from dllm.models.placement import resolve_device, resolve_dtype

    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device=device)
    preset = TINY if args.tiny else FULL
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.models is None:
        if device.type == "cpu" and not args.tiny:
            raise ValueError("real model shapes on the CPU need tens of GB and hours; pass --tiny for a dry "
                             "run, or name the shapes to build with --models")
        args.models = list(TINY_SHAPES if args.tiny else REAL_SHAPES)
    extra = parse_kv(args.config_arg)
    known = {f.name for f in dataclasses.fields(GenerationConfig)}
    owned = {"gen_length", "block_length", "steps", "stop_at_eos"}  # set by the check itself
    unknown = sorted(set(extra) - (known - owned))
    if unknown:
        raise ValueError(f"--config-arg {unknown}: not a GenerationConfig field the check lets you set; "
                         f"use one of {sorted(known - owned)}")
    for gen in args.gen_lengths:  # every length and option checked by GenerationConfig itself
        GenerationConfig(gen_length=gen, block_length=args.block_length, **extra)
    canvas = args.prompt_length + max(args.gen_lengths)
    for name in args.models:
        context = shape_config(name).max_sequence_length
        if canvas > context:
            raise ValueError(f"--prompt-length {args.prompt_length} + --gen-lengths {max(args.gen_lengths)} = "
                             f"{canvas} positions exceed {name}'s context of {context}; shorten one of them")
    if not args.no_tests and not (REPO / "tests").is_dir():
        raise ValueError(f"no tests/ folder beside the package ({REPO}); run from a checkout, or pass --no-tests")
    return device, dtype, extra


def run_tests(device, pytest_args: str, out: Path) -> dict:
    """The suite with DLLM_TEST_DEVICE set to ``device``; its output goes to OUT/tests.log."""
    cmd = [sys.executable, "-m", "pytest", *shlex.split(pytest_args)]
    env = {**os.environ, "DLLM_TEST_DEVICE": str(device),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    log.info("test suite on %s: %s", device, " ".join(cmd))
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    (out / "tests.log").write_text(done.stdout + done.stderr)
    found = [line for line in done.stdout.splitlines() if re.search(r"\d+ (passed|failed|errors?|skipped)", line)]
    summary = found[-1].strip("= ") if found else f"no pytest summary (exit status {done.returncode}; see tests.log)"
    return {"command": f"DLLM_TEST_DEVICE={device} {' '.join(['python', *cmd[1:]])}", "device": str(device),
            "returncode": done.returncode, "summary": summary, "seconds": seconds}


def measure_model(name: str, args: argparse.Namespace, device, dtype, extra: dict, peak, command: str) -> dict:
    import torch

    from dllm.bench import gpu_measure as gm
    from dllm.bench.random_models import build_random_model, parameter_bytes

    start = time.perf_counter()
    model = build_random_model(name, device=device, dtype=dtype)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    build_s = time.perf_counter() - start
    caches, methods = gm.cache_methods(args.block_length), gm.decoding_methods()
    shapes = [gm.Shape(b, args.prompt_length, g, args.block_length) for g in args.gen_lengths for b in args.batch_sizes]
    warmup_s = gm.warm_up(model, shapes[0], caches + methods, extra, peak)
    forwards, decoding = [], []
    for shape in shapes:
        for method in caches:
            forwards.append(gm.run_decode(model, method, shape, peak, extra))
            log.info("%s %s: %s", name, method.name, _brief(forwards[-1]))
        for method in methods:
            decoding.append(gm.run_decode(model, method, shape, peak, extra))
            log.info("%s %s: %s", name, method.name, _brief(decoding[-1]))
    result = {"model": name, "parameters": sum(p.numel() for p in model.parameters()),
              "weight_bytes": parameter_bytes(model), "dtype": str(dtype).removeprefix("torch."),
              "device": {"name": device_name(device), "torch_device": str(device), "bandwidth_gbs": peak.bandwidth_gbs,
                         "bf16_tflops": peak.bf16_tflops, "peak_source": peak.source},
              "build_s": build_s, "warmup_s": warmup_s, "command": command, "config_args": extra,
              "forwards": forwards, "decoding": decoding}
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def measure_invariance(name: str, args: argparse.Namespace, device, dtype) -> dict:
    """The batch-invariance section on a fresh random model of shape ``name``
    (``dllm.bench.batch_invariance``): 8 ragged rows of up to --prompt-length tokens and one block
    of masks against their batch-1 forwards, and both modes' canvas forward timed at each
    --batch-sizes; seconds on a GPU (about 35 forwards a mode)."""
    import torch

    from dllm.bench.batch_invariance import batch_invariance_section
    from dllm.bench.random_models import build_random_model

    model = build_random_model(name, device=device, dtype=dtype)
    result = {"model": name, "dtype": str(dtype).removeprefix("torch."), "device_name": device_name(device),
              **batch_invariance_section(model, rows=8, prompt_length=args.prompt_length,
                                         gen_length=args.block_length, timing_batches=tuple(args.batch_sizes))}
    log.info("%s batch invariance: default %d/8 rows equal, batch_invariant %d/8, forward ratio %.2fx", name,
             result["default"]["rows_equal"], result["batch_invariant"]["rows_equal"], result["forward_ratio"])
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def _brief(row: dict) -> str:
    if "error" in row:
        return f"batch {row['batch']} gen {row['gen_length']}: {row['error']}"
    return (f"batch {row['batch']} gen {row['gen_length']}: {row['tokens_per_s']:.1f} tokens/s, "
            f"forward {row['forward']['median_s'] * 1e3:.2f} ms, overhead {row['overhead_share'] * 100:.1f}%")


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from dllm.bench.preflight import check_imports

    from dllm.models.placement import resolve_device

    preflight = check_imports(tests=not args.no_tests, cuda=resolve_device(args.device).type == "cuda")
    device, dtype, extra = _resolve(args)
    if device.type == "cuda" and device.index is not None:
        import torch

        torch.cuda.set_device(device)  # CUDA events are recorded on the current device's stream
    out_root = check_output_dir(args.out)

    from dllm.bench.device_peaks import device_peak
    from dllm.bench.gpu_report import device_slug, markdown_report, write_json

    name = device_name(device)
    out = out_root / f"gpu_{device_slug(name)}"
    out.mkdir(parents=True, exist_ok=True)
    peak = device_peak(name, bandwidth_gbs=args.peak_bandwidth_gbs, tflops=args.peak_tflops)
    command = "python -m dllm.bench.gpu_check " + " ".join(shlex.quote(a) for a in argv)
    write_json(out / "environment.json", {"device": name, "versions": preflight.versions, "python": sys.version,
                                          "peak": {"name": peak.name, "bandwidth_gbs": peak.bandwidth_gbs,
                                                   "bf16_tflops": peak.bf16_tflops, "source": peak.source}})
    status = 0
    if not args.no_tests:
        tests = run_tests(device, args.pytest_args, out)
        write_json(out / "tests.json", tests)
        log.info("tests: %s", tests["summary"])
        status = EXIT_FAILED if tests["returncode"] != 0 else 0
    if not args.no_batch_invariance:
        write_json(out / f"invariance_{args.models[0]}.json", measure_invariance(args.models[0], args, device, dtype))
    sizes = f"b{'-'.join(map(str, args.batch_sizes))}_g{'-'.join(map(str, args.gen_lengths))}"
    for model_name in args.models:  # one file per model and selection: split runs add up
        result = measure_model(model_name, args, device, dtype, extra, peak, command)
        write_json(out / f"model_{model_name}_{sizes}.json", result)
        failed = [r for r in result["forwards"] + result["decoding"]
                  if "error" in r and not r["error"].startswith("out of memory")]
        if failed:
            log.error("%s: %d measurement(s) failed, e.g. %s", model_name, len(failed), failed[0]["error"])
            status = EXIT_FAILED
    report = markdown_report(out)
    (out / "results.md").write_text(report)
    print(report)
    log.info("results in %s", out)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    configure_logging(0, args.quiet)
    from dllm.bench.preflight import MissingModules

    try:
        return run(args, argv)
    except (ValueError, FileNotFoundError, MissingModules) as err:
        print(f"gpu_check: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `... | head`: the results are already written to the folder
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    raise SystemExit(main())
