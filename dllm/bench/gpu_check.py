"""``python -m dllm.bench.gpu_check`` (``bash bench/gpu_check.sh``): prove dllm on a CUDA machine.

The default run fits 8 minutes on one H100 or H200 (sized by counting, issue 38 item 5); every
stage catches its own failure, records it and goes on, and each writes its JSON as it ends:

1. checks that every module it needs imports (naming each missing one; never installs);
2. runs the GPU test subset (``GPU_TESTS``: the kernels natively, the compiled and graph-replayed
   decodes against eager, the caches, the host-read budget) with the device-generic tests on the
   device (``DLLM_TEST_DEVICE``), stopped at ``--tests-budget-s``; ``--full`` runs the suite;
3. builds the first ``--models`` shape (default LLaDA-8B, random weights, bf16, no checkpoint)
   on the device and, per cache (none, prefix, dual), times the decode step in each forward
   mode, eager, ``compile=True`` and CUDA graphs, against the weight-read floor, with the time
   to the first token including compilation or capture (``dllm.bench.gpu_modes``);
4. when ``FASTDLLM_DIR`` names a Fast-dLLM checkout (its ``llada`` folder or the checkout
   root; nothing of it is copied here), the same model side by side with Fast-dLLM's LLaDA
   loops, per cache (``dllm.bench.fastdllm_side``);
5. runs a ragged batch of 8 rows through the first model, as built and with
   ``batch_invariant=True``'s kernels (``dllm.bench.batch_invariance``; issue 39);
6. with ``--full``: every ``--models`` shape per batch size and answer length, one forward per
   cache mode against the roofline, the engine's overhead per step, and tokens/s with NFE for
   top-k, threshold 0.9, FreeDave and LoPA (hours at batch 32 and 1024 tokens: split it);
7. writes ``OUT/gpu_<device>/`` (JSON per stage + ``results.md``) and prints the tables.

``--tiny --device cpu`` runs every stage on seconds-sized models (the test suite does).
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
DEFAULT = {"batch_sizes": [1], "prompt_length": 256, "gen_lengths": [256], "block_length": 32}
TINY = {"batch_sizes": [1, 2], "prompt_length": 8, "gen_lengths": [16], "block_length": 8}
# The default test stage: what the device changes, most telling first (a stop at the budget cuts
# the end): replayed and compiled forwards against eager in every family, the kernels natively,
# the host reads per round, the caches' in-place K/V; the rest of the suite is device-independent
# logic the CPU runs cover (--full runs it all, minutes more).
GPU_TESTS = ("tests/runner", "tests/models/test_compile.py", "tests/kernels", "tests/samplers/test_host_syncs.py",
             "tests/cache/test_caches.py")
FASTDLLM_ENV = "FASTDLLM_DIR"
# The default run's 450 s, counted for LLaDA-8B on one H100 / H200 (issue 38: 22-42 ms a forward
# eager, so a 64-forward decode takes 1.5-3 s; compiling took 55-110 s a cache): the tests get
# TESTS_S and leave at least RESERVE_S; the model is built once (~10 s); the forward-mode rows
# (eager and graphs ~15-25 s each, compile up to 90 s: gpu_modes.ROW_S) start while the time
# Fast-dLLM's side by side needs (FASTDLLM_S: the weights copied, 3 caches x 2 sides x (1 + reps)
# decodes) is left; the batch-invariance section (~70 forwards and its Triton kernels' compile)
# runs if INVARIANCE_S is left. So with FASTDLLM_DIR: ~90 tests + 10 + ~50 eager and graphs +
# compile dual and prefix (~110 + ~90) + 90 Fast-dLLM, and compile's none row is the first
# named as skipped when compiling is slow; --no-tests or a larger --budget-s gives it the time.
TESTS_S, RESERVE_S, FASTDLLM_S, INVARIANCE_S = 90.0, 240.0, 90.0, 40.0


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
                   help=f"model shapes, any of {', '.join(sorted(SHAPES))}; the first one gets the forward-mode, "
                        f"Fast-dLLM and batch-invariance stages (default: llada-8b; with --full {' '.join(REAL_SHAPES)}; "
                        "with --tiny the tiny ones)")
    p.add_argument("--batch-sizes", nargs="+", type=positive_int, default=None,
                   help=f"default: {DEFAULT['batch_sizes']} ({FULL['batch_sizes']} with --full, {TINY['batch_sizes']} "
                        "with --tiny); the forward-mode stage takes the first")
    p.add_argument("--prompt-length", type=positive_int, default=None,
                   help=f"prompt tokens (default: {DEFAULT['prompt_length']}, {TINY['prompt_length']} with --tiny)")
    p.add_argument("--gen-lengths", nargs="+", type=positive_int, default=None,
                   help=f"answer lengths (default: {DEFAULT['gen_lengths']}, {FULL['gen_lengths']} with --full, "
                        f"{TINY['gen_lengths']} with --tiny); the forward-mode stage takes the first")
    p.add_argument("--block-length", type=positive_int, default=None,
                   help=f"default: {DEFAULT['block_length']} ({TINY['block_length']} with --tiny)")
    p.add_argument("--config-arg", action="append", metavar="K=V",
                   help="a GenerationConfig field added to every measured decode, repeatable")
    p.add_argument("--peak-bandwidth-gbs", type=positive_float, default=None,
                   help="device memory bandwidth in GB/s (default: looked up from the device name)")
    p.add_argument("--peak-tflops", type=positive_float, default=None,
                   help="dense bf16 TFLOP/s (default: looked up from the device name)")
    p.add_argument("--full", action="store_true",
                   help="the long runs too: the whole suite as the test stage, and every --models shape "
                        f"measured per batch size and answer length (defaults {FULL['batch_sizes']} x "
                        f"{FULL['gen_lengths']}); hours for the 8B shapes at batch 32")
    p.add_argument("--no-tests", action="store_true", help="skip the test suite stage")
    p.add_argument("--budget-s", type=positive_float, default=450.0,
                   help="seconds the stages of the run share (default: 450, so that the whole check with its "
                        "start fits 8 minutes); a row that cannot end before it is skipped and named; not with --full")
    p.add_argument("--tests-budget-s", type=positive_float, default=None,
                   help="stop the test stage after this many seconds, recording what ran (default: 90; "
                        "with --full no limit)")
    p.add_argument("--no-modes", action="store_true",
                   help="skip the forward-mode stage (eager / compile / CUDA graphs per cache)")
    p.add_argument("--modes-budget-s", type=positive_float, default=240.0,
                   help="start no new row of the forward-mode stage after this many seconds (default: 240; "
                        "a compile in progress finishes; compiling LLaDA-8B took 55-110 s a cache on an H200)")
    p.add_argument("--reps", type=positive_int, default=3,
                   help="warm decodes per row of the forward-mode and Fast-dLLM stages (default: 3)")
    p.add_argument("--no-batch-invariance", action="store_true",
                   help="skip the batch-invariance section (a ragged batch's rows against their batch-1 "
                        "forwards, default and batch_invariant=True, on the first model)")
    p.add_argument("--pytest-args", default=None,
                   help="arguments of the test stage's pytest (default: the GPU subset, "
                        f"{' '.join(GPU_TESTS)}; with --full none, the whole suite)")
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
    preset = TINY if args.tiny else FULL if args.full else DEFAULT
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.models is None:
        if device.type == "cpu" and not args.tiny:
            raise ValueError("real model shapes on the CPU need tens of GB and hours; pass --tiny for a dry "
                             "run, or name the shapes to build with --models")
        args.models = list(TINY_SHAPES if args.tiny else REAL_SHAPES if args.full else ["llada-8b"])
    if args.pytest_args is None:
        args.pytest_args = "" if args.full else " ".join(GPU_TESTS)
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


def run_tests(device, pytest_args: str, out: Path, budget_s: float | None = None) -> dict:
    """The tests with DLLM_TEST_DEVICE set to ``device``, stopped after ``budget_s`` seconds;
    their output goes to OUT/tests.log."""
    cmd = [sys.executable, "-m", "pytest", *shlex.split(pytest_args)]
    env = {**os.environ, "DLLM_TEST_DEVICE": str(device), "PYTHONUNBUFFERED": "1",  # a stop keeps the output
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    log.info("tests on %s: %s", device, " ".join(cmd))
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # its own group: a stop at the budget ends its workers too
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=budget_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, 9)
        stdout, stderr = proc.communicate()
    seconds = time.perf_counter() - start
    (out / "tests.log").write_text(stdout + stderr)
    found = [line for line in stdout.splitlines() if re.search(r"\d+ (passed|failed|errors?|skipped)", line)]
    if timed_out:
        # progress lines: "path.py ..sF  [ 40%]", or the marks alone under -q
        marks = "".join(m.group(1) for m in re.finditer(r"^(?:\S+\.py )?([.sFExX]+)(?: +\[ *\d+%\])?$", stdout,
                                                        re.MULTILINE))
        summary = (f"stopped at the {budget_s:.0f} s budget: {marks.count('.')} passed, {marks.count('F')} failed, "
                   f"{marks.count('E')} errors, {marks.count('s')} skipped so far (see tests.log)")
    else:
        summary = found[-1].strip("= ") if found else f"no pytest summary (exit status {proc.returncode}; see tests.log)"
    failed = bool(re.search(r"[FE]", marks)) if timed_out else proc.returncode != 0
    return {"command": f"DLLM_TEST_DEVICE={device} {' '.join(['python', *cmd[1:]])}", "device": str(device),
            "returncode": proc.returncode, "timed_out": timed_out, "failed": failed, "summary": summary,
            "seconds": seconds}


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


def measure_invariance(model, name: str, args: argparse.Namespace) -> dict:
    """The batch-invariance section on the random model of shape ``name``, which it spends (its
    modules are swapped; ``dllm.bench.batch_invariance``): 8 ragged rows of up to --prompt-length
    tokens and one block of masks against their batch-1 forwards, and both modes' canvas forward
    timed at each --batch-sizes; seconds on a GPU (about 35 forwards a mode)."""
    from dllm.bench.batch_invariance import batch_invariance_section

    result = {"model": name, "dtype": str(model.dtype).removeprefix("torch."), "device_name": device_name(model.device),
              **batch_invariance_section(model, rows=8, prompt_length=args.prompt_length,
                                         gen_length=args.block_length, timing_batches=tuple(args.batch_sizes),
                                         step_batches=(1, 2) if args.tiny else (1, 8))}  # issue 39's sizes
    log.info("%s batch invariance: default %d/8 rows equal, batch_invariant %d/8, forward ratio %.2fx", name,
             result["default"]["rows_equal"], result["batch_invariant"]["rows_equal"], result["forward_ratio"])
    return result


def _brief(row: dict) -> str:
    if "error" in row:
        return f"batch {row['batch']} gen {row['gen_length']}: {row['error']}"
    return (f"batch {row['batch']} gen {row['gen_length']}: {row['tokens_per_s']:.1f} tokens/s, "
            f"forward {row['forward']['median_s'] * 1e3:.2f} ms, overhead {row['overhead_share'] * 100:.1f}%")


def measure_modes(model, name: str, args: argparse.Namespace, extra: dict, peak, command: str,
                  deadline: float) -> dict:
    """The forward-mode stage on the random model of shape ``name``: per cache, eager / compile /
    CUDA graphs (``dllm.bench.gpu_modes``) at the first batch size and answer length."""
    from dllm.bench import gpu_measure as gm
    from dllm.bench.gpu_modes import measure_modes as rows_of
    from dllm.bench.random_models import parameter_bytes

    shape = gm.Shape(args.batch_sizes[0], args.prompt_length, args.gen_lengths[0], args.block_length)
    rows = rows_of(model, shape, peak, extra, reps=args.reps, deadline=deadline)
    for row in rows:
        log.info("%s %s %s: %s", name, row["cache"], row["mode"], row.get("error") or row.get("unavailable")
                 or f"step {row['step_s'] * 1e3:.2f} ms ({_num(row['x_floor'])}x the floor), first token "
                    f"{row['first_token_s']:.1f} s")
    return {"model": name, "dtype": str(model.dtype).removeprefix("torch."), "device_name": device_name(model.device),
            "weight_bytes": parameter_bytes(model), "bandwidth_gbs": peak.bandwidth_gbs, "command": command,
            "config_args": extra, "rows": rows}


def measure_fastdllm(model, name: str, folder: Path, args: argparse.Namespace, command: str) -> dict:
    """dllm and Fast-dLLM's LLaDA loops side by side on the random model (``dllm.bench.fastdllm_side``)."""
    import torch

    from dllm.bench.fastdllm_side import side_by_side

    result = side_by_side(folder, model, name, batch=args.batch_sizes[0], prompt_length=args.prompt_length,
                          gen_length=args.gen_lengths[0], block_length=args.block_length, reps=args.reps)
    result.update(command=command, device_name=device_name(model.device))
    if model.device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _stage(name: str, out: Path, fn, *args) -> dict | None:
    """Run one stage; a failure is logged and written to OUT/stage_<name>.json instead of
    stopping the check (the other stages' numbers must not be lost). Returns its result or None."""
    from dllm.bench.gpu_report import write_json

    start = time.perf_counter()
    try:
        return fn(*args)
    except Exception as err:  # recorded, and the next stage runs
        log.error("stage %s failed: %s: %s", name, type(err).__name__, err)
        write_json(out / f"stage_{name}.json", {"stage": name, "error": f"{type(err).__name__}: {err}",
                                                "seconds": time.perf_counter() - start})
        return None


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from dllm.bench.preflight import check_imports

    from dllm.models.placement import resolve_device

    preflight = check_imports(tests=not args.no_tests, cuda=resolve_device(args.device).type == "cuda",
                              whole_suite=args.full or args.pytest_args is not None)
    device, dtype, extra = _resolve(args)
    fastdllm = os.environ.get(FASTDLLM_ENV)
    if fastdllm:
        from dllm.bench.fastdllm_side import check_fastdllm_imports, llada_folder

        fastdllm = llada_folder(Path(fastdllm))  # a wrong folder is refused here, before any model work
        check_fastdllm_imports()
        from dllm.bench.random_models import SHAPES

        if SHAPES[args.models[0]][0] != "llada":
            raise ValueError(f"{FASTDLLM_ENV} is set, and Fast-dLLM's loops here are its LLaDA ones: put a LLaDA "
                             f"shape first in --models (not {args.models[0]}) or unset {FASTDLLM_ENV}")
    if device.type == "cuda" and device.index is not None:
        import torch

        torch.cuda.set_device(device)  # CUDA events are recorded on the current device's stream
    out_root = check_output_dir(args.out)

    from dllm.bench.device_peaks import device_peak
    from dllm.bench.gpu_report import device_slug, markdown_report, write_json

    name = device_name(device)
    out = out_root / f"gpu_{device_slug(name)}"
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("stage_*.json"):  # failures of an earlier run, not this one's
        stale.unlink()
    peak = device_peak(name, bandwidth_gbs=args.peak_bandwidth_gbs, tflops=args.peak_tflops)
    command = "python -m dllm.bench.gpu_check " + " ".join(shlex.quote(a) for a in argv)
    write_json(out / "environment.json", {"device": name, "versions": preflight.versions, "python": sys.version,
                                          "peak": {"name": peak.name, "bandwidth_gbs": peak.bandwidth_gbs,
                                                   "bf16_tflops": peak.bf16_tflops, "source": peak.source}})
    status = 0
    first = args.models[0]
    sizes = f"b{'-'.join(map(str, args.batch_sizes))}_g{'-'.join(map(str, args.gen_lengths))}"
    first_sizes = f"b{args.batch_sizes[0]}_g{args.gen_lengths[0]}"
    # the default run's stages share --budget-s; --full runs to the end unless budgets are given
    end = time.perf_counter() + (float("inf") if args.full else args.budget_s)
    if not args.no_tests:
        tests_budget = args.tests_budget_s or (None if args.full else TESTS_S)
        budget = None if tests_budget is None else max(1.0, min(tests_budget, end - time.perf_counter() - RESERVE_S))
        tests = _stage("tests", out, run_tests, device, args.pytest_args, out, budget)
        if tests is not None:
            write_json(out / "tests.json", tests)
            log.info("tests: %s", tests["summary"])
        status |= EXIT_FAILED if tests is None or tests["failed"] else 0
    model = None
    if not (args.no_modes and not fastdllm and args.no_batch_invariance):  # one model for the three stages
        from dllm.bench.random_models import build_random_model

        model = _stage("build", out, lambda: build_random_model(first, device=device, dtype=dtype))
        status |= EXIT_FAILED if model is None else 0
    if model is not None and not args.no_modes:
        # rows start until the stage's budget or the run's (less what the later stages need) is spent
        deadline = min(time.perf_counter() + args.modes_budget_s, end - (FASTDLLM_S if fastdllm else 0))
        modes = _stage("modes", out, measure_modes, model, first, args, extra, peak, command, deadline)
        if modes is not None:
            write_json(out / f"modes_{first}_{first_sizes}.json", modes)
        failed = None if modes is None else [r for r in modes["rows"] if "error" in r]
        if modes is None or failed:
            status = EXIT_FAILED
            if failed:
                log.error("%s: %d forward-mode row(s) failed, e.g. %s", first, len(failed), failed[0]["error"])
    if model is not None and fastdllm:
        side = _stage("fastdllm", out, measure_fastdllm, model, first, fastdllm, args, command)
        if side is not None:
            write_json(out / f"fastdllm_{first}_{first_sizes}.json", side)
        status |= EXIT_FAILED if side is None or any("error" in r for r in side["rows"]) else 0
    elif not fastdllm:
        log.info("no Fast-dLLM side by side: set %s to a Fast-dLLM checkout to run it", FASTDLLM_ENV)
    if model is not None and not args.no_batch_invariance:  # last: it spends the model
        if end - time.perf_counter() < INVARIANCE_S:
            log.warning("batch invariance skipped: the run's --budget-s is spent")
            write_json(out / "stage_invariance.json", {"stage": "invariance", "seconds": 0.0,
                                                       "skipped": "the run's --budget-s was spent"})
        else:
            inv = _stage("invariance", out, measure_invariance, model, first, args)
            if inv is not None:
                write_json(out / f"invariance_{first}.json", inv)
            status |= EXIT_FAILED if inv is None else 0
    del model
    if device.type == "cuda":
        import torch

        torch.cuda.empty_cache()
    for model_name in args.models if args.full else []:  # one file per model and selection: split runs add up
        result = _stage(f"full_{model_name}", out, measure_model, model_name, args, device, dtype, extra, peak, command)
        if result is None:
            status = EXIT_FAILED
            continue
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
