"""Per-request records of an lm-eval run: what makes a rerun resume, and the speed summary.

Each rank appends one JSON line per finished request to ``SAVE_DIR/dllm_requests.rankR.jsonl``
(as Fast-dLLM's evaluation does). A record holds the request's answer and its speed (NFE,
tokens, token-forwards, seconds) under a fingerprint of everything that decides the answer
(model, dtype, GenerationConfig, Monte-Carlo settings). A rerun with the same save folder and
fingerprint answers those requests from the records, whichever rank wrote them; records of
another fingerprint are left alone. ``dllm_speed.json`` sums the records of the run's own
requests (answered now or from the records) per task and request type, so a score always comes
with its NFE, TPF and tokens/s, and not with those of an earlier run into the same folder.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from dllm.bench.results_store import atomic_write_text

REQUESTS_GLOB = "dllm_requests.rank*.jsonl"
SPEED_FILE = "dllm_speed.json"


def fingerprint(values: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:16]


def request_key(kind: str, args: Any) -> str:
    return hashlib.sha256(json.dumps([kind, args], default=str).encode()).hexdigest()


class RequestRecords:
    """The records of one fingerprint in ``save_dir`` (None: keep nothing, resume nothing).
    ``writes`` False: read them (to skip what is done, like the rank that writes) but write
    nothing: a tensor-parallel rank other than its copy's first."""

    def __init__(self, save_dir: str | Path | None, rank: int, run_fingerprint: str, writes: bool = True) -> None:
        self.dir = None if save_dir is None else Path(save_dir)
        self.fingerprint, self.writes = run_fingerprint, writes
        self.done: dict[str, dict[str, Any]] = {}
        self.used: set[str] = set()  # keys of this run's requests: what the speed file sums
        if self.dir is None:
            return
        if self.dir.exists() and not self.dir.is_dir():
            raise ValueError(f"save_dir {self.dir} is a file; pass a folder (or another --output_path)")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / f"dllm_requests.rank{rank}.jsonl"
        for record in self._all_records():
            self.done[record["key"]] = record

    def _all_records(self) -> list[dict[str, Any]]:
        records = []
        for path in sorted(self.dir.glob(REQUESTS_GLOB)):
            for line in path.read_text().splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:  # a line cut short by an interrupted run
                    continue
                if record.get("fingerprint") == self.fingerprint:
                    records.append(record)
        return records

    def get(self, kind: str, args: Any) -> dict[str, Any] | None:
        key = request_key(kind, args)
        if key in self.done:
            self.used.add(key)
        return self.done.get(key)

    def add(self, kind: str, args: Any, record: dict[str, Any]) -> None:
        record = {"key": request_key(kind, args), "fingerprint": self.fingerprint, "kind": kind, **record}
        self.done[record["key"]] = record
        self.used.add(record["key"])
        if self.dir is not None and self.writes:
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")

    def write_speed(self, keys: set[str] | None = None) -> dict[str, Any] | None:
        """``dllm_speed.json``: per (task, request type) means over the records of ``keys``
        (default: this process's requests; rank 0 passes every rank's), from any rank's file."""
        if self.dir is None or not self.writes:
            return None
        keys = self.used if keys is None else keys
        summary = speed_summary([r for r in self._all_records() if r["key"] in keys])
        atomic_write_text(self.dir / SPEED_FILE, json.dumps(summary, indent=2) + "\n")
        return summary


def speed_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """NFE per request, TPF (tokens per forward, summed), tokens/s (tokens / decode seconds)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault((record.get("task") or "", record["kind"]), []).append(record)
    rows = []
    for (task, kind), group in sorted(groups.items()):
        nfe = sum(r["nfe"] for r in group)
        tokens = sum(r.get("tokens", 0) for r in group)
        seconds = sum(r["seconds"] for r in group)
        rows.append({"task": task, "request_type": kind, "requests": len(group), "nfe": nfe / len(group),
                     "tokens": tokens / len(group), "tpf": tokens / nfe if nfe and tokens else None,
                     "token_forwards": sum(r.get("token_forwards", 0) for r in group) / len(group),
                     "tokens_per_s": tokens / seconds if seconds and tokens else None, "seconds": seconds})
    return {"rows": rows}
