"""The server's Prometheus metrics, in a registry of its own (one per app, so several servers
in one process do not collide). Names follow the project's metrics: NFE, TPF, tokens; the
process collector adds the process's memory, CPU time and open files."""
from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
TPF_BUCKETS = (0.5, 1, 1.5, 2, 3, 4, 6, 8, 16)


class ServerMetrics:
    """Counters and histograms the handlers update; queue depth and running rows are read from
    the scheduler when scraped."""

    def __init__(self, scheduler) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("dllm_requests", "HTTP requests by endpoint and status", ["endpoint", "status"], registry=r)
        self.rows = Counter("dllm_rows_finished", "Rows (choices) finished, by dllm finish reason", ["reason"], registry=r)
        self.tokens = Counter("dllm_generated_tokens", "Answer tokens returned", registry=r)
        self.prompt_tokens = Counter("dllm_prompt_tokens", "Prompt tokens admitted", registry=r)
        self.nfe = Counter("dllm_nfe", "Model forwards summed over rows", registry=r)
        self.tpf = Histogram("dllm_tpf", "Tokens per forward of each finished row", buckets=TPF_BUCKETS, registry=r)
        self.ttft = Histogram("dllm_ttft_seconds", "Time from request to its first final token",
                              buckets=LATENCY_BUCKETS, registry=r)
        self.latency = Histogram("dllm_request_latency_seconds", "Time from request to its last token",
                                 buckets=LATENCY_BUCKETS, registry=r)
        queue = Gauge("dllm_queue_depth", "Requests waiting for a row", registry=r)
        queue.set_function(lambda: scheduler.queue_depth)
        running = Gauge("dllm_running_rows", "Rows in the running batch", registry=r)
        running.set_function(lambda: scheduler.running_rows)
        ProcessCollector(registry=r)  # process_resident_memory_bytes, process_cpu_seconds_total, open fds

    def row_finished(self, reason: str, tokens: int, stats: dict[str, Any] | None) -> None:
        self.rows.labels(reason=reason).inc()
        self.tokens.inc(tokens)
        if stats:
            self.nfe.inc(stats.get("nfe", 0))
            if stats.get("nfe"):
                self.tpf.observe(stats.get("tpf", 0.0))

    def render(self) -> bytes:
        return generate_latest(self.registry)
