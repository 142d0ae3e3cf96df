"""The server's Prometheus metrics, in a registry of its own (one per app, so several servers
in one process do not collide). Names follow the project's metrics: NFE, TPF, tokens; the
process collector adds the process's memory, CPU time and open files."""
from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

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
        r.register(PromptCacheCollector(scheduler))
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


class PromptCacheCollector:
    """The prompt K/V store's counters (``dllm.cache.prompt_store``), read when scraped; nothing
    when the scheduler has no store."""

    COUNTERS = (("lookups", "Rows that looked their prompt blocks up"),
                ("hit_rows", "Rows that found at least one prompt block"),
                ("hit_blocks", "Prompt blocks found"),
                ("tokens_reused", "Prompt tokens whose K/V came from the store"),
                ("tokens_computed", "Prompt tokens whose K/V a refresh computed"),
                ("inserted_blocks", "Prompt blocks stored"),
                ("evicted_blocks", "Prompt blocks evicted (least recently used)"))

    def __init__(self, scheduler) -> None:
        self.scheduler = scheduler

    def collect(self):
        store = getattr(self.scheduler, "prompt_store", None)
        if store is None:
            return
        stats = store.stats
        for name, doc in self.COUNTERS:
            yield CounterMetricFamily(f"dllm_prompt_cache_{name}", doc, value=getattr(stats, name))
        yield GaugeMetricFamily("dllm_prompt_cache_bytes", "Bytes the prompt K/V store holds", value=store.bytes)
        yield GaugeMetricFamily("dllm_prompt_cache_max_bytes", "The store's bound (--prompt-cache-mb)",
                                value=store.max_bytes)
        yield GaugeMetricFamily("dllm_prompt_cache_blocks", "Prompt blocks the store holds", value=len(store))
