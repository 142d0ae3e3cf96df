"""``dllm bench parallelbench``: argument parsing for sweeps of runs.

Each ``--policy NAME`` starts a run line; the ``--policy-arg K=V`` that follow belong to it.
``--tokens-per-step 1 2 4 8`` expands every line into one run per value (steps =
gen_length / k). ``--runs FILE`` (JSON list of {name, line, options, tokens_per_step, gen_length}) gives
full control (caches, strategies, stoppers); ``{model}`` in any of its option strings stands
for the ``--model`` directory, so one grid can name each model's own files (a Learn2PD filter).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from dllm.cli.options import load_from_args, parse_kv, positive_int
from dllm.cli.output import check_output_dir, show_progress


class _PolicyAction(argparse.Action):
    def __call__(self, parser, namespace, value, option_string=None):
        lines = getattr(namespace, "lines", None) or []
        if option_string == "--policy":
            lines.append({"policy": value, "args": []})
        else:
            if not lines:
                raise argparse.ArgumentError(self, "--policy-arg must follow a --policy")
            lines[-1]["args"].append(value)
        namespace.lines = lines


def _with_model_dir(value, model_dir: str):
    """``value`` (options read from a --runs file) with ``{model}`` in its strings replaced."""
    if isinstance(value, str):
        return value.replace("{model}", model_dir)
    if isinstance(value, dict):
        return {k: _with_model_dir(v, model_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_model_dir(v, model_dir) for v in value]
    return value


def _answer_canvas(args: argparse.Namespace) -> int | None:
    """--gen-length, or the whole blocks that hold --max-tokens (None: each task's own length);
    grids built in code pass a Namespace without either."""
    from dllm.engine.config import block_aligned_gen_length

    gen_length, max_tokens = getattr(args, "gen_length", None), getattr(args, "max_tokens", None)
    if max_tokens is None:
        return gen_length
    if gen_length is not None:
        raise ValueError(f"pass --max-tokens {max_tokens} or --gen-length {gen_length}, not both")
    return block_aligned_gen_length(max_tokens, getattr(args, "block_length", None))


def _policy_run_flags(args: argparse.Namespace) -> list[str]:
    """The flags given that only --policy runs read (a --runs file would leave them unused)."""
    lines = getattr(args, "lines", None) or []
    given = [("--policy", any(line["policy"] for line in lines)),
             ("--policy-arg", any(line["args"] for line in lines)),
             ("--tokens-per-step", getattr(args, "tokens_per_step", None)),
             ("--block-length", getattr(args, "block_length", None)),
             ("--cache", getattr(args, "cache", "none") != "none"),
             ("--strategy", getattr(args, "strategy", "plain") != "plain"),
             ("--stopper", getattr(args, "stopper", "none") != "none")]
    return [flag for flag, value in given if value]


def build_runs(args: argparse.Namespace):
    from dllm.bench.parallelbench import Run
    from dllm.bench.results_store import _display_path
    from dllm.models.bundled import resolve_model_path

    gen_length = _answer_canvas(args)
    if args.runs:
        try:
            entries = json.loads(Path(args.runs).read_text())
            runs = [Run(**r) for r in entries]
        except (OSError, json.JSONDecodeError, TypeError) as err:
            raise ValueError(f"--runs {args.runs}: {err}; it must be a JSON list of "
                             "{name, line, options, tokens_per_step, gen_length}") from err
        if gen_length is not None:
            raise ValueError("--gen-length / --max-tokens apply to --policy runs; a --runs file sets each run's "
                             "gen_length")
        if ignored := _policy_run_flags(args):
            raise ValueError(f"{', '.join(ignored)} build --policy runs; a --runs file sets each run's options "
                             f"itself: drop {'it' if len(ignored) == 1 else 'them'} or drop --runs")
        if not runs:
            raise ValueError(f"--runs {args.runs} holds no runs; it must be a non-empty JSON list of "
                             "{name, line, options, tokens_per_step, gen_length}")
        if "{model}" in json.dumps(entries):
            model = resolve_model_path(getattr(args, "model", None), getattr(args, "revision", None))
            model_dir = _display_path(model)
            for run in runs:
                run.options = _with_model_dir(run.options, model_dir)
        return runs
    common = {"cache": args.cache, "strategy": args.strategy, "stopper": args.stopper}
    if args.block_length:
        common["block_length"] = args.block_length
    runs = []
    for line in args.lines or [{"policy": "low_confidence", "args": []}]:
        policy_args = parse_kv(line["args"])
        label = line["policy"] + "".join(f" {k}={v}" for k, v in policy_args.items())
        options = {**common, "policy": line["policy"], "policy_args": policy_args}
        tps_values = args.tokens_per_step or [None]
        for tps in tps_values:
            name = label if tps is None else f"{label} k={tps}"
            name += "" if gen_length is None else f" gen={gen_length}"
            runs.append(Run(name=name.replace(" ", "_"), line=label, options=options, tokens_per_step=tps,
                            gen_length=gen_length))
    return runs


# config.json key a checkpoint declares its prompt protocol with: the example exchanges (shots)
# before each prompt it was trained on (dllm-waitingline-d2f: 0; the other bundled models declare
# none and run the benchmark's one-shot protocol)
PROMPT_SHOTS_KEY = "dllm_prompt_shots"


def declared_shots(model_dir: Path) -> int | None:
    """The shots ``model_dir``'s config.json declares it was trained with (None: it says nothing)."""
    try:
        raw = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None  # the loader reports a missing or damaged config.json
    value = raw.get(PROMPT_SHOTS_KEY) if isinstance(raw, dict) else None
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value not in (0, 1):
        raise ValueError(f"{Path(model_dir) / 'config.json'}: {PROMPT_SHOTS_KEY}={value!r} must be 0 or 1 "
                         "(the example exchanges the model was trained with); fix it or pass --shots")
    return value


def choose_shots(args: argparse.Namespace) -> tuple[int | None, str]:
    """The shots of the run and the line saying why: --shots when given, else what the checkpoint
    declares (``dllm_prompt_shots``), else the benchmark's protocol (None: each task's own)."""
    if args.shots is not None:
        return args.shots, f"protocol: {args.shots}-shot (--shots {args.shots})"
    from dllm.models.bundled import resolve_model_path

    model_dir = resolve_model_path(getattr(args, "model", None), getattr(args, "revision", None))
    shots = declared_shots(model_dir)
    if shots is not None:
        return shots, (f"protocol: {shots}-shot, the prompts {model_dir.name} declares it was trained with "
                       f"(config.json {PROMPT_SHOTS_KEY}={shots}); --shots 1 for the benchmark's one-shot protocol")
    return None, (f"protocol: the benchmark's (each task's icl_example_count: one-shot for waiting-line and puzzle "
                  f"tasks); {model_dir.name} declares no {PROMPT_SHOTS_KEY} in config.json; --shots 0 for zero-shot")


def cmd_parallelbench(args: argparse.Namespace) -> int:
    from dllm.bench.parallelbench import OFFLINE_TASKS, plan_parallelbench
    from dllm.bench.parallelbench_fresh import FRESH_TASKS, FreshSamples, check_fresh_request
    from dllm.data.prompts import default_data_dir
    from dllm.parallel.groups import check_layout

    # everything that can be wrong with the command is found before the model loads
    runs = build_runs(args)
    out_dir = Path(args.out)
    check_output_dir(out_dir)
    data_dir = Path(args.data) if args.data else default_data_dir()
    if (args.fresh_samples is None) != (args.fresh_seed is None):
        raise ValueError("--fresh-samples N and --fresh-seed S go together: give both (or neither, "
                         "for the official files)")
    fresh = FreshSamples(args.fresh_samples, args.fresh_seed) if args.fresh_samples is not None else None
    tasks = args.tasks or list(FRESH_TASKS if fresh else OFFLINE_TASKS)
    if fresh is not None:  # before the checkpoint is read for its protocol
        check_fresh_request(tasks, fresh.count, fresh.seed)
    shots, protocol = choose_shots(args)
    plans = plan_parallelbench(data_dir, runs, tasks=tasks, shots=shots, limit=args.limit,
                               batch_size=args.batch_size, fresh=fresh)
    check_layout(args.tensor_parallel, whole_world=True)  # one copy of the model over the job
    if args.tensor_parallel == 1:
        print(protocol, flush=True)
        return _run_and_report(args, data_dir, runs, tasks, shots, plans, out_dir, lead=True)
    from dllm.parallel.dist import leave_together, run_rank

    def body(rank: int) -> None:  # every rank decodes every batch with its share of the model
        if rank == 0:
            print(protocol, flush=True)
        _run_and_report(args, data_dir, runs, tasks, shots, plans, out_dir, lead=rank == 0)  # rank 0 writes

    run_rank(body)
    leave_together()
    return 0


def _run_and_report(args: argparse.Namespace, data_dir: Path, runs, tasks: list[str], shots: int | None, plans,
                    out_dir: Path, *, lead: bool) -> int:
    from dllm.bench.parallelbench import run_parallelbench

    model = load_from_args(args)
    summary = run_parallelbench(model, data_dir, runs, tasks=tasks, shots=shots, limit=args.limit,
                                batch_size=args.batch_size, out_dir=out_dir, plans=plans,
                                show_progress=lead and show_progress(getattr(args, "quiet", False)), writes=lead)
    if not lead:
        return 0
    for e in summary["runs"]:
        score = "n/a" if e["mean_score"] is None else f"{100 * e['mean_score']:.1f}"
        tpf = "n/a" if e["tpf"] is None else f"{e['tpf']:.2f}"
        print(f"{e['run']:<40} score {score:>5}  TPF {tpf}  NFE {e['nfe']:.1f}  samples {e['samples']}")
    if summary["pb"]:
        print(PB_LEGEND)
    for line, pb in summary["pb"].items():
        print(f"{run_label(line):<40} " + "  ".join(f"{k} {pb_value(v)}" for k, v in pb.items()))
    print(f"results: {out_dir / 'summary.json'}")
    plots = summary["plots"]
    print(plots if isinstance(plots, str) else "plot: " + ", ".join(map(str, plots)))
    return 0


PB_LEGEND = ("PBx: the highest TPF of the line's runs whose mean score is at least x% "
             "('-': no run of the line reached it)")


def run_label(line: str) -> str:
    """A line's label written as its runs' names are (``threshold tau=0.9`` -> ``threshold_tau=0.9``)."""
    return line.replace(" ", "_")


def pb_value(tpf: float) -> str:
    """A PBx value for the summary: the TPF, or "-" when no run reached the score (stored as 0.0)."""
    return f"{tpf:.2f}" if tpf > 0 else "-"


def register(sub) -> None:
    from dllm.cli.options import add_model_options, add_tensor_parallel_option, policy_names

    names = policy_names()
    p = sub.add_parser("parallelbench", help="ParallelBench quality against TPF")
    add_model_options(p)
    add_tensor_parallel_option(p)
    p.add_argument("--data", default=None, help="official ParallelBench data dir (default: $DLLM_PARALLELBENCH_DIR, or ../shared/data/parallelbench "
                        "beside a source checkout)")
    p.add_argument("--tasks", nargs="+", default=None, help="tasks like waiting_line/copy (default: every offline-scored task)")
    p.add_argument("--policy", action=_PolicyAction, dest="lines", metavar="RULE", choices=names["policy"],
                   help=f"unmasking rule, one of: {', '.join(names['policy'])}; starts a run line, repeatable "
                        "(default: low_confidence)")
    p.add_argument("--policy-arg", action=_PolicyAction, dest="lines", metavar="K=V",
                   help="option of the preceding --policy, repeatable (e.g. tau=0.9)")
    p.add_argument("--tokens-per-step", type=positive_int, nargs="+", default=None, metavar="K",
                   help="sweep: one run per K, steps = gen_length / K (default: the rule's own step budget)")
    p.add_argument("--block-length", type=positive_int, default=None, help="block size (default: the task's gen length)")
    p.add_argument("--gen-length", type=positive_int, default=None, metavar="N",
                   help="decode every task on an N-token answer canvas instead of the task's own gen length "
                        "(an answer should not depend on the room it is given)")
    p.add_argument("--max-tokens", type=positive_int, default=None, metavar="N",
                   help="instead of --gen-length: the canvas is the smallest whole number of blocks that holds N "
                        "tokens (the scorer reads the whole answer; default: the task's gen length)")
    p.add_argument("--cache", default="none", choices=names["cache"], metavar="CACHE",
                   help=f"KV cache of every --policy run, one of: {', '.join(names['cache'])}")
    p.add_argument("--strategy", default="plain", choices=names["strategy"], metavar="STRATEGY",
                   help=f"decoding strategy of every --policy run, one of: {', '.join(names['strategy'])}")
    p.add_argument("--stopper", default="none", choices=names["stopper"], metavar="STOPPER",
                   help=f"stopping criterion of every --policy run, one of: {', '.join(names['stopper'])}")
    p.add_argument("--runs", default=None, metavar="FILE",
                   help="JSON file with a list of runs {name, line, options, tokens_per_step, gen_length} "
                        "(instead of --policy; default: none)")
    p.add_argument("--shots", type=int, default=None, choices=[0, 1],
                   help="example exchanges before each prompt (default: what the checkpoint declares it was "
                        f"trained with, config.json {PROMPT_SHOTS_KEY}, e.g. 0 for dllm-waitingline-d2f; else the "
                        "benchmark's protocol, each task's icl_example_count: one-shot for waiting-line and "
                        "puzzle tasks, as the other bundled models run); the first line of output states it")
    p.add_argument("--stratified-samples", "--limit", dest="limit", type=positive_int, default=None,
                   metavar="N", help="N samples per task, one from the middle of each of N equal strata "
                        "of the file (which is ordered by list length), never its first N; default: every sample")
    p.add_argument("--fresh-samples", type=positive_int, default=None, metavar="N",
                   help="score N freshly generated samples per task instead of the official files (same "
                        "templates and scorer; needs --fresh-seed; default: the official files)")
    p.add_argument("--fresh-seed", type=int, default=None, metavar="S",
                   help="seed of the fresh samples; at least 1000000, above every seed training draws from "
                        "(default: none)")
    p.add_argument("--batch-size", type=positive_int, default=50, help="samples decoded together")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory; a rerun into it skips the (run, "
                   "task) pairs it already holds (default: none, required)")
    p.set_defaults(func=cmd_parallelbench)
