"""Abuse of ``dllm serve`` (issue 31): /health latency and the server's RSS while bad requests
are refused.

    python bench/serve_abuse.py --out bench/results/serve_abuse

Starts ``python -m dllm serve`` (the bundled model unless ``--model``) on 127.0.0.1 at a free
port, measures /health for a few seconds at rest, then runs each case ``--repeats`` times while
a thread calls /health every 20 ms and samples the server's VmRSS from /proc:

* ``body_50mb_announced``: a Content-Length of 50 MB, then the body sent in 1 MiB pieces until the
  server answers and closes (413 before it is read);
* ``body_50mb_chunked``: 50 MB as a chunked body with no length (413 once it passes the limit);
* ``prompt_3.9mb``: a 3.9 MB prompt, under the body limit (400 before tokenizing: characters);
* ``prompts_400k``: a list of 400,000 short prompts (400: rows per request);
* ``lone_surrogate``: ``"\\ud800"`` in a prompt and in chat content (400 naming the field);
* ``half_sent_bodies_20``: 20 connections that announce 1000 bytes and send 15 (408 after
  ``--body-timeout``);
* ``half_sent_headers_20``: 20 connections that stop inside their headers (closed after
  ``--header-timeout``).

Every case is bounded: a socket timeout per exchange, a count per case, and the whole run by
``--time-limit`` seconds. Writes OUT.json and OUT.md (OUT = ``--out``, e.g.
bench/results/serve_abuse -> serve_abuse.json, serve_abuse.md).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import shlex
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from dllm.bench.raw_http import head as raw_head, raw_exchange, status_of
from dllm.bench.results_store import cpu_model
from dllm.bench.serve_load import ServerProcess, percentile

MB = 1 << 20
EXCHANGE_TIMEOUT_S = 60.0


def exchange(port: int, data: bytes, **options) -> tuple[bytes, float]:
    """``raw_exchange`` and the seconds until the server closed (or the timeout)."""
    start = time.perf_counter()
    answer = raw_exchange(port, data, timeout=EXCHANGE_TIMEOUT_S, **options)
    return answer, time.perf_counter() - start


class Watcher:
    """/health every ``every`` s and VmRSS with it, in a thread; ``window()`` marks a span."""

    def __init__(self, server: ServerProcess, every: float = 0.02) -> None:
        self.server, self.every = server, every
        self.samples: list[tuple[float, float | None, float | None]] = []  # (t, health s or None, rss MiB)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self.stop.is_set():
                t = time.perf_counter()
                try:
                    ok = client.get(self.server.url + "/health").status_code == 200
                    seconds = time.perf_counter() - t if ok else None
                except httpx.HTTPError:
                    seconds = None
                self.samples.append((t, seconds, self.server.rss_mb()))
                self.stop.wait(self.every)

    def __enter__(self) -> "Watcher":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=35)

    def summary(self, start: float, end: float) -> dict:
        inside = [s for s in self.samples if start <= s[0] <= end]
        health = [s[1] for s in inside if s[1] is not None]
        rss = [s[2] for s in inside if s[2] is not None]
        ms = lambda v: None if v is None else round(v * 1000, 2)  # noqa: E731
        return {"health_calls": len(inside), "health_failed": sum(s[1] is None for s in inside),
                "health_p50_ms": ms(percentile(health, 50)), "health_p99_ms": ms(percentile(health, 99)),
                "health_max_ms": ms(max(health, default=None)), "rss_max_mb": max(rss, default=None)}


def head(port: int, length: int | None = None, chunked: bool = False, path: str = "/v1/completions") -> bytes:
    return raw_head(port, length, chunked, path, close=True)  # the answer's end is the connection's


def cases(port: int, repeats: int) -> dict:
    """name -> a callable that runs the case once and returns [(status, seconds), ...]."""
    piece = b"x" * MB
    chunk = b"%x\r\n%s\r\n" % (MB, piece)
    big_prompt = json.dumps({"prompt": "word " * (39 * MB // 50), "max_tokens": 8}).encode()  # 3.9 MB
    many = json.dumps({"prompt": ["hi"] * 400_000, "max_tokens": 8}).encode()
    surrogates = [(b'{"prompt": "a\\ud800b", "max_tokens": 4}', "/v1/completions"),
                  (b'{"messages": [{"role": "user", "content": "hi \\ud800"}], "max_tokens": 4}',
                   "/v1/chat/completions")]

    def body(data: bytes, path: str = "/v1/completions"):
        return lambda: [_status_time(exchange(port, head(port, len(data), path=path) + data))]

    def parallel(make, count: int):
        def run():
            with concurrent.futures.ThreadPoolExecutor(count) as pool:
                return [_status_time(a) for a in pool.map(lambda _: make(), range(count))]
        return run

    return {
        "body_50mb_announced": lambda: [_status_time(exchange(port, head(port, 50 * MB), more=piece, chunks=50))],
        "body_50mb_chunked": lambda: [_status_time(exchange(port, head(port, chunked=True), more=chunk, chunks=50))],
        "prompt_3.9mb": body(big_prompt),
        "prompts_400k": body(many),
        "lone_surrogate": lambda: [r for data, path in surrogates for r in body(data, path)()],
        "half_sent_bodies_20": parallel(lambda: exchange(port, head(port, 1000) + b'{"prompt": "abc'), 20),
        "half_sent_headers_20": parallel(
            lambda: exchange(port, b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty"), 20),
    }


def _status_time(result: tuple[bytes, float]) -> tuple[int, float]:
    answer, seconds = result
    return status_of(answer), seconds


def run(args: argparse.Namespace) -> dict:
    extra = ["--body-timeout", str(args.body_timeout), "--header-timeout", str(args.header_timeout),
             "--threads", str(args.threads)]
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, \
            ServerProcess(args.model, continuous=True, max_batch=8, max_queue=64, log_path=Path(tmp) / "server.log",
                          device="cpu", extra_args=extra) as server, Watcher(server) as watch:
        time.sleep(args.rest)
        t = time.perf_counter()
        time.sleep(args.rest)
        results = {"at_rest": {**watch.summary(t, time.perf_counter()), "rss_mb": server.rss_mb()}, "cases": {}}
        for name, case in cases(server.port, args.repeats).items():
            if time.monotonic() - started > args.time_limit:
                results["cases"][name] = {"skipped": f"over --time-limit {args.time_limit} s"}
                continue
            before = server.rss_mb()
            t = time.perf_counter()
            answers = [a for _ in range(args.repeats) for a in case()]
            end = time.perf_counter()
            time.sleep(args.settle)  # the memory the refusals left behind; /health still watched
            statuses: dict[str, int] = {}
            for status, _ in answers:
                statuses[str(status)] = statuses.get(str(status), 0) + 1
            results["cases"][name] = {
                "requests": len(answers), "statuses": statuses,
                "answer_s_max": round(max(s for _, s in answers), 3),
                "answer_s_p50": round(percentile([s for _, s in answers], 50), 3),
                "case_s": round(end - t, 2), "rss_before_mb": before, **watch.summary(t, time.perf_counter()),
                "rss_after_mb": server.rss_mb()}
            print(name, json.dumps(results["cases"][name]), flush=True)
        results["rss_end_mb"] = server.rss_mb()
    return results


def markdown(result: dict) -> str:
    rest = result["at_rest"]
    lines = [f"Server: `{result['server_command']}` on {result['machine']}.",
             f"At rest: /health p50 {rest['health_p50_ms']} ms, p99 {rest['health_p99_ms']} ms, "
             f"max {rest['health_max_ms']} ms; RSS {rest['rss_mb']:.0f} MiB.", "",
             "| case | answers (status: count) | answered in max (s) | /health p50 / p99 / max (ms) during | "
             "/health failed | RSS before / peak / after (MiB) |",
             "|---|---|---|---|---|---|"]
    for name, c in result["cases"].items():
        if "skipped" in c:
            lines.append(f"| {name} | skipped: {c['skipped']} | | | | |")
            continue
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(c["statuses"].items()))
        lines.append(f"| {name} | {statuses} | {c['answer_s_max']} | {c['health_p50_ms']} / {c['health_p99_ms']} / "
                     f"{c['health_max_ms']} ({c['health_calls']} calls) | {c['health_failed']} | "
                     f"{c['rss_before_mb']:.0f} / {c['rss_max_mb']:.0f} / {c['rss_after_mb']:.0f} |")
    lines.append(f"\nRSS at the end: {result['rss_end_mb']:.0f} MiB. Each case ran {result['repeats']} times "
                 "(status 0: the server closed the connection without an answer); /health is watched from a case's "
                 f"start to {result['settle_s']} s after its end.")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="model directory (default: the bundled model)")
    p.add_argument("--repeats", type=int, default=3, help="times each case runs")
    p.add_argument("--body-timeout", type=float, default=2.0, help="the server's --body-timeout (s)")
    p.add_argument("--header-timeout", type=float, default=2.0, help="the server's --header-timeout (s)")
    p.add_argument("--threads", type=int, default=1, help="the server's torch threads")
    p.add_argument("--rest", type=float, default=2.0, help="seconds of /health at rest (after as long to settle)")
    p.add_argument("--settle", type=float, default=1.0, help="seconds after each case before RSS is read")
    p.add_argument("--time-limit", type=float, default=600.0, help="no case starts after this many seconds")
    p.add_argument("--note", default="", help="said of the machine in the results (e.g. shared with other jobs)")
    p.add_argument("--out", required=True, help="output path without suffix (writes OUT.json and OUT.md)")
    args = p.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"command": "python " + shlex.join(sys.argv),
            "server_command": (f"python -m dllm serve --device cpu --body-timeout {args.body_timeout} "
                               f"--header-timeout {args.header_timeout} --threads {args.threads}"
                               + (f" --model {args.model}" if args.model else "")),
            "machine": f"{cpu_model()}, {os.cpu_count()} CPUs ({platform.machine()})" + (f", {args.note}" if args.note else ""),
            "load_average_before": os.getloadavg(), "repeats": args.repeats, "settle_s": args.settle}
    result = {**meta, **run(args), "load_average_after": os.getloadavg()}
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
