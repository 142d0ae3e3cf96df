"""``dllm bench serve``: a load generator for ``dllm serve`` on loopback.

For each batching mode (continuous, static) a server runs as a subprocess on 127.0.0.1; for each
rate, ``--requests`` streamed completions arrive as a Poisson process (bounded by
``--duration`` seconds of arrivals and ``--timeout`` per request). Measured per rate: completed
requests, throughput (answer tokens / s and requests / s over the run), TTFT (the first chunk
with text, or the end of an answer with none) and latency p50 / p99, 429s. ``--soak N`` instead
sends N requests with random cancellations, checks every completed request's tokens against its
single-run tokens (one ``generate_ids`` call in this process) and samples the server's RSS over
time.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from dllm.cli.output import LOGGER_NAME
from dllm.engine.config import DEFAULT_BLOCK_LENGTH

log = logging.getLogger(LOGGER_NAME)

NAMES = ["Ann Lee", "Tom Kay", "Sue Ray", "Bob Jones", "Eve Day", "Al Bo", "Kim Su", "Zed Moe", "Liz Fox",
         "Max Orr", "Ida Poe", "Ned Ash"]
TASKS = ["Reverse the list", "Sort the list", "Who is second in line", "Who is last in line"]


def bench_prompts(count: int, seed: int) -> list[str]:
    """``count`` waiting-line style prompts of varied lengths (ragged batches)."""
    rng = random.Random(seed)
    return [f"{rng.choice(TASKS)}: {', '.join(rng.sample(NAMES, rng.randrange(2, 7)))}" for _ in range(count)]


@dataclass(slots=True)
class Outcome:
    """One request as the client saw it."""

    sent: float
    status: int = 0
    ttft: float | None = None
    latency: float | None = None
    tokens: int = 0
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    cancelled: bool = False
    error: str | None = None  # a transport error (the request is counted, not completed)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def invariant_args(args: argparse.Namespace) -> list[str]:
    """``--batch-invariant`` for the server when the benchmark was given it."""
    return ["--batch-invariant"] if getattr(args, "batch_invariant", False) else []


def server_model_args(args: argparse.Namespace) -> list[str]:
    """The model options given to the benchmark that ``ServerProcess`` does not take itself
    (``--batch-invariant``, ``--adapter``, ``--helper``), for the server's command line: the
    server decodes the model that was asked for, the one the soak's single runs load."""
    extra = invariant_args(args)
    for flag, value in (("--adapter", getattr(args, "adapter", None)), ("--helper", getattr(args, "helper", None))):
        extra += [flag, value] if value else []
    return extra


class ServerProcess:
    """``dllm serve`` in a subprocess on 127.0.0.1 (a free port), stopped on exit."""

    def __init__(self, model: str | None, *, continuous: bool, max_batch: int, max_queue: int,
                 log_path: Path, device: str = "auto", dtype: str = "auto", prepack: bool = False,
                 startup_timeout: float = 300.0, forward_overhead_tokens: float | None = None,
                 revision: str | None = None, extra_args: list[str] | tuple[str, ...] = (),
                 quantize: str | None = None) -> None:
        """``extra_args``: more ``dllm serve`` options, as on its command line."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "dllm", "serve", "--host", "127.0.0.1", "--port", str(self.port),
               "--max-batch", str(max_batch), "--max-queue", str(max_queue), "--device", device,
               "--dtype", dtype]
        cmd += ["--model", model] if model else []
        cmd += ["--revision", revision] if revision else []
        cmd += ["--prepack"] if prepack else []
        cmd += ["--quantize", quantize] if quantize else []
        cmd += [] if continuous else ["--static"]
        if forward_overhead_tokens is not None:
            cmd += ["--forward-overhead-tokens", str(forward_overhead_tokens)]
        cmd += list(extra_args)
        self.log_file = log_path.open("w")
        self.proc = subprocess.Popen(cmd, stdout=self.log_file, stderr=subprocess.STDOUT, env=os.environ.copy())
        self.startup_timeout = startup_timeout

    def __enter__(self) -> "ServerProcess":
        import httpx

        deadline = time.monotonic() + self.startup_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dllm serve exited with status {self.proc.returncode}; see {self.log_file.name}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"dllm serve did not answer within {self.startup_timeout} s")
            time.sleep(0.2)

    def rss_mb(self) -> float | None:
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            return None
        return None

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log_file.close()


CANCEL_WITHIN_CHUNKS = 3  # a cancelled request closes its stream after 0, 1 or 2 chunks


async def one_request(client, url: str, body: dict, timeout: float, cancel_after: int | None) -> Outcome:
    """Stream one completion; with ``cancel_after``, close the stream after that many chunks
    (0: as soon as the response starts), unless the answer ended first. Counting chunks rather
    than seconds cancels mid-stream whatever the server's speed."""
    import httpx

    out = Outcome(sent=time.perf_counter())
    try:
        async with asyncio.timeout(timeout):
            async with client.stream("POST", url + "/v1/completions", json={**body, "stream": True}) as r:
                out.status = r.status_code
                if r.status_code != 200:
                    await r.aread()
                    return out
                chunks = 0
                async for line in r.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    if cancel_after is not None and chunks >= cancel_after:
                        out.cancelled = True  # leaving the block closes the stream
                        return out
                    chunks += 1
                    choice = json.loads(line[6:])["choices"][0]
                    # the first token the client sees: text, or the end of an answer that had none
                    # (an answer of only end-of-text streams no text, and its first token ends it)
                    if out.ttft is None and (choice.get("text") or choice.get("finish_reason") is not None):
                        out.ttft = time.perf_counter() - out.sent
                    if choice.get("finish_reason") is not None:
                        out.token_ids = choice["dllm"]["token_ids"]
                        out.tokens = len(out.token_ids)
                        out.finish_reason = choice["dllm"]["finish_reason"]
        out.latency = time.perf_counter() - out.sent
    except TimeoutError:
        out.finish_reason = "client_timeout"
    except httpx.TransportError as err:  # e.g. a keep-alive connection the server closed as it was reused
        out.error = f"{type(err).__name__}: {err}"
    return out


async def poisson_run(url: str, bodies: list[dict], rate: float, duration: float, timeout: float, seed: int,
                      cancel_prob: float = 0.0, on_tick=None) -> tuple[list[Outcome], float]:
    """Send ``bodies`` at Poisson arrivals of ``rate`` per second (no arrival after
    ``duration`` s); returns the outcomes and the run's wall time."""
    import httpx

    rng = random.Random(seed)
    start = time.perf_counter()
    tasks = []
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout), limits=limits) as client:
        at = 0.0
        for body in bodies:
            at += rng.expovariate(rate)
            if at > duration:
                break
            delay = at - (time.perf_counter() - start)
            if delay > 0:
                await asyncio.sleep(delay)
            if on_tick is not None:
                on_tick()
            cancel = rng.randrange(CANCEL_WITHIN_CHUNKS) if rng.random() < cancel_prob else None
            tasks.append(asyncio.create_task(one_request(client, url, body, timeout, cancel)))
        pending = set(tasks)
        while pending:
            _, pending = await asyncio.wait(pending, timeout=0.5)
            if on_tick is not None:
                on_tick()
    return [t.result() for t in tasks], time.perf_counter() - start


def summarize(outcomes: list[Outcome], wall: float) -> dict:
    done = [o for o in outcomes if o.status == 200 and o.latency is not None and not o.cancelled and o.error is None]
    tokens = sum(o.tokens for o in done)
    latencies = [o.latency for o in done]
    ttfts = [o.ttft for o in done if o.ttft is not None]
    return {
        "sent": len(outcomes), "completed": len(done), "rejected_429": sum(o.status == 429 for o in outcomes),
        "cancelled": sum(o.cancelled for o in outcomes), "transport_errors": sum(o.error is not None for o in outcomes),
        "wall_s": wall,
        "throughput_tokens_per_s": tokens / wall if wall > 0 else 0.0,
        "throughput_requests_per_s": len(done) / wall if wall > 0 else 0.0,
        "ttft_p50_s": percentile(ttfts, 50), "ttft_p99_s": percentile(ttfts, 99),
        "latency_p50_s": percentile(latencies, 50), "latency_p99_s": percentile(latencies, 99),
    }


PREAMBLE_TEXT = ("You answer questions about a waiting line. The line is a list of names, first to last. "
                 "To reverse it, read it from the last name to the first. To sort it, order the names "
                 "alphabetically. The second in line is the name after the first; the last in line ends "
                 "the list. Answer with the names only, separated by commas. ")


def shared_preamble(model: str | None, tokens: int, revision: str | None = None) -> list[int]:
    """``tokens`` token ids of a fixed system-prompt text (repeated as needed), with the model's
    own tokenizer (only the tokenizer is loaded)."""
    from dllm.models.bundled import resolve_model_path
    from dllm.models.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(resolve_model_path(model, revision))
    ids: list[int] = []
    while len(ids) < tokens:
        ids += tokenizer(PREAMBLE_TEXT, add_special_tokens=False)["input_ids"]
    return ids[:tokens]


def request_bodies(args: argparse.Namespace, count: int, seed: int) -> list[dict]:
    """``count`` request bodies: prompts drawn from a pool of ``--prompt-pool`` and answer lengths
    from ``--max-tokens`` (so identical requests recur and their single runs are computed once).
    With ``--shared-prefix-tokens N`` every prompt is token ids: the same N-token preamble, then
    the pool prompt's own ids."""
    rng = random.Random(seed)
    pool: list = bench_prompts(args.prompt_pool, seed)
    if getattr(args, "shared_prefix_tokens", 0):
        from dllm.models.bundled import resolve_model_path
        from dllm.models.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(resolve_model_path(args.model, args.revision))
        preamble = shared_preamble(args.model, args.shared_prefix_tokens, args.revision)
        pool = [preamble + tokenizer(p, add_special_tokens=False)["input_ids"] for p in pool]
    # seed 0, as the single runs the soak checks against (a request without one gets a fresh seed)
    options = {"policy": args.policy, "cache": args.cache, "seed": 0}
    if args.policy_arg:
        from dllm.cli.options import parse_kv

        options["policy_args"] = parse_kv(args.policy_arg)
    bodies = []
    for _ in range(count):
        max_tokens = rng.choice(args.max_tokens)
        bodies.append({"prompt": rng.choice(pool), "max_tokens": max_tokens, **options,
                       **block_option(args.block_length, max_tokens)})
    return bodies


def block_option(block_length: int | str | None, max_tokens: int) -> dict:
    """The block_length field a request sends: none (the server's default block), one block of
    the answer (``"max"``: generate's default, the server's before it had one), or a number."""
    if block_length is None:
        return {}
    return {"block_length": max_tokens if block_length == "max" else block_length}


def prompt_cache_counters(url: str) -> dict[str, float]:
    """The server's ``dllm_prompt_cache_*`` values from /metrics (empty without a store)."""
    import httpx

    values = {}
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith("dllm_prompt_cache_") and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name.removeprefix("dllm_prompt_cache_").removesuffix("_total")] = float(value)
    return values


def run_rates(args: argparse.Namespace, out_dir: Path) -> dict:
    """Each batching mode (and each ``--prompt-cache-mb`` size: the modes are then named
    "continuous, prompt cache 256 MiB" and so on) on its own server, every rate on it in turn."""
    results: dict = {"rates": args.rates, "modes": {}}
    sizes = args.prompt_cache_mb or [None]
    for mode in args.modes:
        for size in sizes:
            name = mode if size is None else f"{mode}, prompt cache {size:g} MiB"
            extra = [] if size is None else ["--prompt-cache-mb", f"{size:g}"]
            results["modes"][name] = []
            log_name = f"server_{mode}" + ("" if size is None else f"_prompt_cache_{size:g}") + ".log"
            with ServerProcess(args.model, continuous=mode == "continuous", max_batch=args.max_batch,
                               max_queue=args.max_queue, log_path=out_dir / log_name,
                               device=args.device, dtype=args.dtype,
                               prepack=args.prepack, forward_overhead_tokens=args.forward_overhead_tokens,
                               revision=args.revision, extra_args=extra + server_model_args(args),
                               quantize=args.quantize) as server:
                before = prompt_cache_counters(server.url)
                if args.behind:
                    long_body, short_body = behind_bodies(args)
                    results.setdefault("behind", {})[name] = asyncio.run(
                        behind_run(server.url, long_body, short_body, args.behind_delay, args.timeout))
                    log.info("%s behind: %s", name, json.dumps(results["behind"][name]))
                for i, rate in enumerate(args.rates):
                    bodies = request_bodies(args, args.requests, args.seed + i)
                    outcomes, wall = asyncio.run(poisson_run(server.url, bodies, rate, args.duration, args.timeout,
                                                             args.seed + i))
                    row = {"rate": rate, **summarize(outcomes, wall)}
                    after = prompt_cache_counters(server.url)
                    if after:  # this rate's share of the store's counters; its size at the end
                        row["prompt_cache"] = {k: v - before.get(k, 0) if k not in ("bytes", "max_bytes", "blocks")
                                               else v for k, v in after.items()}
                    before = after
                    log.info("%s rate %.2f/s: %s", name, rate, json.dumps(row))
                    results["modes"][name].append(row)
    return results


def run_soak(args: argparse.Namespace, out_dir: Path) -> dict:
    """``args.soak`` requests, a share cancelled at random; completed tokens against single runs;
    the server's RSS sampled as it goes."""
    from dllm.cli.options import load_from_args

    bodies = request_bodies(args, args.soak, args.seed)
    rss: list[tuple[float, float]] = []
    with ServerProcess(args.model, continuous=True, max_batch=args.max_batch, max_queue=args.max_queue,
                       log_path=out_dir / "server_soak.log", device=args.device, dtype=args.dtype,
                       prepack=args.prepack, revision=args.revision, quantize=args.quantize,
                       extra_args=server_model_args(args)) as server:
        start = time.perf_counter()
        last = [0.0]

        def sample() -> None:
            now = time.perf_counter() - start
            if now - last[0] >= args.rss_every:
                last[0] = now
                value = server.rss_mb()
                if value is not None:
                    rss.append((round(now, 2), round(value, 1)))

        outcomes, wall = asyncio.run(poisson_run(server.url, bodies, args.rates[-1], args.duration, args.timeout,
                                                 args.seed, cancel_prob=args.cancel_prob, on_tick=sample))
    model = load_from_args(args)
    references: dict[str, list[int]] = {}  # one single run per distinct request body
    mismatches = 0
    for body, outcome in zip(bodies, outcomes):
        if outcome.cancelled or outcome.status != 200 or outcome.finish_reason is None:
            continue
        key = json.dumps(body, sort_keys=True)
        if key not in references:
            references[key] = model.generate_ids(
                [body["prompt"] if isinstance(body["prompt"], list) else model.encode(body["prompt"], chat=False)],
                max_tokens=body["max_tokens"],
                block_length=body.get("block_length", DEFAULT_BLOCK_LENGTH), policy=body["policy"],
                policy_args=body.get("policy_args", {}), cache=body["cache"]).token_ids[0]
        mismatches += outcome.token_ids != references[key]
    summary = summarize(outcomes, wall)
    return {**summary, "requests": args.soak, "cancel_prob": args.cancel_prob, "rate": args.rates[-1],
            "checked_against_single_run": summary["completed"], "token_mismatches": mismatches,
            "rss_mb": rss, "rss_first_mb": rss[0][1] if rss else None, "rss_last_mb": rss[-1][1] if rss else None,
            "rss_max_mb": max((v for _, v in rss), default=None)}


async def behind_run(url: str, long_body: dict, short_body: dict, delay: float, timeout: float) -> dict:
    """A short request alone, then the same short request sent ``delay`` s after a long one
    started: how long the short one waits behind the long one (TTFT and latency, seconds)."""
    import httpx

    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout)) as client:
        await one_request(client, url, short_body, timeout, None)  # warm-up: a fresh server's first forwards
        alone = await one_request(client, url, short_body, timeout, None)
        long_task = asyncio.create_task(one_request(client, url, long_body, timeout, None))
        await asyncio.sleep(delay)
        behind = await one_request(client, url, short_body, timeout, None)
        long = await long_task
    return {"short_alone_ttft_s": alone.ttft, "short_alone_latency_s": alone.latency,
            "short_behind_ttft_s": behind.ttft, "short_behind_latency_s": behind.latency,
            "long_latency_s": long.latency, "long_tokens": long.tokens}


def behind_bodies(args: argparse.Namespace) -> tuple[dict, dict]:
    """The long and the short request of ``--behind LONG,SHORT`` (answers of those lengths: end-of-text
    does not end them early, so the long one keeps the server busy)."""
    long_tokens, short_tokens = args.behind
    common = {"policy": args.policy, "cache": args.cache, "seed": 0, "stop_at_eos": False}
    prompt = bench_prompts(1, args.seed)[0]
    return ({"prompt": prompt, "max_tokens": long_tokens, **common, **block_option(args.block_length, long_tokens)},
            {"prompt": prompt, "max_tokens": short_tokens, **common, **block_option(args.block_length, short_tokens)})


def markdown(results: dict) -> str:
    """One table row per (rate, mode), continuous and static side by side."""
    def f(value, digits=2):
        return "-" if value is None else f"{value:.{digits}f}"

    reuse = any("prompt_cache" in r for rows in results["modes"].values() for r in rows)
    lines = ["| rate (req/s) | mode | completed | tokens/s | req/s | TTFT p50 (s) | TTFT p99 (s) | latency p50 (s) | "
             "latency p99 (s) |" + (" prompt tokens reused |" if reuse else ""),
             "|---|---|---|---|---|---|---|---|---|" + ("---|" if reuse else "")]
    for i, rate in enumerate(results["rates"]):
        for mode, rows in results["modes"].items():
            r = rows[i]
            line = (f"| {rate:g} | {mode} | {r['completed']}/{r['sent']} | {f(r['throughput_tokens_per_s'], 1)} | "
                    f"{f(r['throughput_requests_per_s'])} | {f(r['ttft_p50_s'])} | {f(r['ttft_p99_s'])} | "
                    f"{f(r['latency_p50_s'])} | {f(r['latency_p99_s'])} |")
            if reuse:
                c = r.get("prompt_cache")
                total = c and c.get("tokens_reused", 0) + c.get("tokens_computed", 0)
                line += f" {c['tokens_reused']:.0f} of {total:.0f} |" if total else " - |"
            lines.append(line)
    if results.get("behind"):
        lines += ["", "| mode | short alone: TTFT / latency (s) | short behind the long one: TTFT / latency (s) | "
                      "long: latency (s) |", "|---|---|---|---|"]
        for mode, b in results["behind"].items():
            lines.append(f"| {mode} | {f(b['short_alone_ttft_s'])} / {f(b['short_alone_latency_s'])} | "
                         f"{f(b['short_behind_ttft_s'])} / {f(b['short_behind_latency_s'])} | {f(b['long_latency_s'])} |")
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for mode, rows in results["modes"].items():
        rates = [r["rate"] for r in rows]
        (line,) = a.plot(rates, [r["latency_p99_s"] for r in rows], marker="o", label=f"{mode} p99")
        a.plot(rates, [r["latency_p50_s"] for r in rows], marker=".", linestyle="--", color=line.get_color(),
               label=f"{mode} p50")
        b.plot(rates, [r["throughput_tokens_per_s"] for r in rows], marker="o", label=mode)
    a.set(xlabel="arrival rate (requests/s)", ylabel="latency (s)", title="latency")
    b.set(xlabel="arrival rate (requests/s)", ylabel="answer tokens/s", title="throughput")
    a.legend()
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_rss(rss: list[tuple[float, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([t for t, _ in rss], [v for _, v in rss])
    ax.set(xlabel="time (s)", ylabel="server RSS (MiB)", title="soak: server memory")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    from dllm.cli.output import check_output_dir

    out_dir = check_output_dir(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = {"model": args.model or "bundled", "device": args.device, "dtype": args.dtype, "prepack": args.prepack,
            "quantize": args.quantize, "adapter": args.adapter, "helper": args.helper,
            "max_batch": args.max_batch, "max_queue": args.max_queue,
            "max_tokens": args.max_tokens, "block_length": args.block_length, "policy": args.policy, "cache": args.cache,
            "policy_args": args.policy_arg or [], "seed": args.seed, "cpu_threads": os.environ.get("OMP_NUM_THREADS"),
            "forward_overhead_tokens": args.forward_overhead_tokens, "load_average_before": os.getloadavg(),
            "shared_prefix_tokens": args.shared_prefix_tokens, "prompt_cache_mb": args.prompt_cache_mb,
            "command": "python -m dllm " + shlex.join(sys.argv[1:])}
    if args.soak:
        result = {**meta, "soak": run_soak(args, out_dir)}
        (out_dir / "soak.json").write_text(json.dumps(result, indent=1) + "\n")
        if result["soak"]["rss_mb"]:
            plot_rss(result["soak"]["rss_mb"], out_dir / "soak_rss.png")
        print(json.dumps({k: v for k, v in result["soak"].items() if k != "rss_mb"}))
        return 0 if result["soak"]["token_mismatches"] == 0 else 1
    result = {**meta, "requests_per_rate": args.requests, "duration_s": args.duration, **run_rates(args, out_dir),
              "load_average_after": os.getloadavg()}
    (out_dir / "serve_load.json").write_text(json.dumps(result, indent=1) + "\n")
    (out_dir / "serve_load.md").write_text(markdown(result))
    plot(result, out_dir / "serve_load.png")
    print(json.dumps(result["modes"]))
    return 0


def _rates(text: str) -> list[float]:
    try:
        rates = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated rates, e.g. 0.5,1,2; got {text!r}") from None
    if not rates or any(not r > 0 for r in rates):
        raise argparse.ArgumentTypeError(f"rates must be positive, got {text!r}")
    return rates


def _positive_ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, e.g. 16,32; got {text!r}") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"values must be positive, got {text!r}")
    return values


def _block_length(text: str) -> int | str:
    if text == "max":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'max', got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'max', got {text!r}")
    return value


def _two_ints(text: str) -> tuple[int, int]:
    values = _positive_ints(text)
    if len(values) != 2:
        raise argparse.ArgumentTypeError(f"expected LONG,SHORT token counts, e.g. 384,8; got {text!r}")
    return values[0], values[1]


def _sizes(text: str) -> list[float]:
    from dllm.serve.cli import megabytes

    return [megabytes(x) for x in text.split(",")]


def _modes(text: str) -> list[str]:
    modes = text.split(",")
    bad = sorted(set(modes) - {"continuous", "static"})
    if bad:
        raise argparse.ArgumentTypeError(f"modes are continuous and static, got {bad}")
    return modes


def register(sub: argparse._SubParsersAction) -> None:
    from dllm.cli.options import add_model_options, non_negative_int, positive_float, positive_int
    from dllm.serve.cli import non_negative_float

    p = sub.add_parser("serve", help="load generator for dllm serve: Poisson arrivals, continuous vs static batching")
    add_model_options(p)  # the server's (and the single-run check's) model, device and dtype
    p.add_argument("--rates", type=_rates, default=[0.5, 1.0, 2.0], help="arrival rates, requests/s, comma-separated")
    p.add_argument("--modes", type=_modes, default=["continuous", "static"], help="batching modes to compare")
    p.add_argument("--requests", type=positive_int, default=40, help="requests per rate (at most)")
    p.add_argument("--duration", type=positive_float, default=60.0, help="seconds of arrivals per rate (at most)")
    p.add_argument("--timeout", type=positive_float, default=300.0, help="a request's time limit, seconds")
    p.add_argument("--max-batch", type=positive_int, default=8, help="the server's max batch")
    p.add_argument("--max-queue", type=positive_int, default=256, help="the server's max queue")
    p.add_argument("--max-tokens", type=_positive_ints, default=[32],
                   help="answer tokens per request, comma-separated (each request draws one)")
    p.add_argument("--cache", default="none", help="KV cache of every request")
    p.add_argument("--prompt-pool", type=positive_int, default=32, help="distinct prompts requests draw from")
    p.add_argument("--block-length", type=_block_length, default=None,
                   help="block_length each request sends: a number, 'max' (one block of its max_tokens, the "
                        "server's default before it had a block of its own), or nothing (default: the server's "
                        f"default block, {DEFAULT_BLOCK_LENGTH})")
    p.add_argument("--behind", type=_two_ints, default=None, metavar="LONG,SHORT",
                   help="also time a SHORT-token request sent --behind-delay s after a LONG-token one, and alone, "
                        "on each mode's server (e.g. 384,8)")
    p.add_argument("--behind-delay", type=positive_float, default=1.0, help="seconds between the long and the short")
    p.add_argument("--policy", default="low_confidence", help="unmasking rule")
    p.add_argument("--policy-arg", action="append", metavar="K=V", help="rule option, repeatable")
    p.add_argument("--forward-overhead-tokens", type=non_negative_float, default=None, metavar="T",
                   help="passed to the continuous server (default: it fits its own)")
    p.add_argument("--shared-prefix-tokens", type=non_negative_int, default=0, metavar="N",
                   help="every prompt starts with the same N-token preamble (a shared system prompt), sent as "
                        "token ids")
    p.add_argument("--prompt-cache-mb", type=_sizes, default=None, metavar="MB,...",
                   help="run each mode once per server --prompt-cache-mb size, side by side (e.g. 0,256: without "
                        "and with prompt reuse; default: the server's default, one run)")
    p.add_argument("--seed", type=int, default=0, help="seed of prompts, arrivals and cancellations")
    p.add_argument("--soak", type=positive_int, default=None, metavar="N",
                   help="soak mode: N requests at the last rate with random cancellations (continuous only)")
    p.add_argument("--cancel-prob", type=float, default=0.2, help="soak: share of requests cancelled mid-stream")
    p.add_argument("--rss-every", type=positive_float, default=1.0, help="soak: seconds between RSS samples")
    p.add_argument("--out", required=True, help="output directory (results JSON and plots)")
    p.set_defaults(func=run)
