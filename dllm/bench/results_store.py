"""The output folder of a benchmark run: checked before any work, written atomically, resumable.

``summary.json`` holds one row per finished (run, task) plus what produced it (``meta``). A
rerun into the same folder reuses every row whose run options, shots and sample selection are
unchanged, adds the new ones, and keeps rows of runs it was not asked for, so a summary is
never replaced by a smaller one. Every file is written to a temporary name and renamed into
place, so an interrupted run leaves the last complete summary, never a half-written one.

Per-sample records (``samples/RUN/TASK.jsonl.gz``) are gzip-compressed, with no timestamp in the
header, so a rerun that writes the same records writes the same bytes (git stores it once);
``read_samples`` also reads the plain ``.jsonl`` of folders written before. ``summary.json``
keeps one row (and one run) per line: readable diffs at a third of an indented file's size.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dllm.cli.output import check_output_dir

SUMMARY = "summary.json"
SAMPLES = "samples"
# fingerprint keys that rows written before they existed lack, and the value those rows had
LEGACY_DEFAULTS = {"dtype": "float32", "prepack": False, "quantize": None}


def cpu_model() -> str:
    """The CPU's model name where Linux says it (``platform.processor()`` is often empty), else
    the architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or f"{platform.machine()} CPU"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: Path, text: str) -> None:
    """``atomic_write_bytes`` of UTF-8 text."""
    atomic_write_bytes(path, text.encode())


def samples_path(out_dir: Path, run: str, task: str) -> Path:
    """Where the per-sample records of (run, task) are written."""
    return out_dir / SAMPLES / run / f"{task.replace('/', '__')}.jsonl.gz"


def read_samples(out_dir: Path, run: str, task: str) -> list[dict[str, Any]]:
    """The per-sample records of (run, task): the compressed file, else a plain ``.jsonl`` of an
    older folder."""
    path = samples_path(out_dir, run, task)
    if path.exists():
        text = gzip.decompress(path.read_bytes()).decode()
    else:
        text = path.with_suffix("").read_text()  # FileNotFoundError names the plain path
    return [json.loads(line) for line in text.splitlines()]


def summary_text(document: dict[str, Any]) -> str:
    """JSON with each top-level key on its line and each element of a top-level list on its own:
    rows and runs stay one line each in a diff."""
    def dump(value: Any) -> str:
        return json.dumps(value, default=str)

    parts = []
    for key, value in document.items():
        if isinstance(value, list):
            items = ",\n".join(f"  {dump(v)}" for v in value)
            parts.append(f"{dump(key)}: [\n{items}\n]" if value else f"{dump(key)}: []")
        else:
            parts.append(f"{dump(key)}: {dump(value)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def _normalized(value: Any) -> Any:
    """The value as it reads back from JSON (tuples become lists, paths strings)."""
    return json.loads(json.dumps(value, default=str))


def _display_path(path: Path | str) -> str:
    """``path`` relative to the working directory when it lies below or beside it, else as given."""
    path = Path(path)
    if not path.is_absolute():
        return str(path)
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive
        return str(path)
    return rel if rel.count("..") <= 2 else str(path)


def git_commit(start: Path) -> str | None:
    """HEAD of the git checkout holding ``start`` (with ``+dirty`` for local changes), else None."""
    try:
        head = subprocess.run(["git", "-C", str(start), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode:
            return None
        dirty = subprocess.run(["git", "-C", str(start), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _program() -> str:
    """How this process was started, without this machine's paths ("python -m dllm" or "dllm")."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    return "python -m dllm" if name == "__main__.py" else name


def run_metadata(*, model: str, data_dir: Path, device: str) -> dict[str, Any]:
    """What produced a summary: model, dllm version and commit, data, command, time, machine."""
    from importlib import metadata

    import torch

    try:
        version = metadata.version("dllm")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return {
        "model": _display_path(model), "dllm_version": version,
        "git_commit": git_commit(Path(__file__).resolve().parent),
        "data_dir": _display_path(data_dir),
        "command": " ".join([_program(), *sys.argv[1:]]),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"system": platform.system(), "machine": platform.machine(),
                    "processor": cpu_model(), "cpu_count": os.cpu_count(),
                    "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
                    "torch": torch.__version__, "device": device},
    }


class ResultStore:
    """Rows of one output folder: the finished ones read back, new ones written as they finish."""

    def __init__(self, out_dir: Path) -> None:
        check_output_dir(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        self.out_dir = out_dir
        self.path = out_dir / SUMMARY
        self.rows: list[dict[str, Any]] = []
        self.meta: dict[str, Any] = {}
        self.invocations: list[dict[str, Any]] = []
        if self.path.exists():
            try:
                previous = json.loads(self.path.read_text())
            except json.JSONDecodeError as err:
                raise ValueError(f"{self.path} is not valid JSON ({err}); move it away or pass another --out") from err
            self.rows = list(previous.get("rows", []))
            self.invocations = list(previous.get("meta", {}).get("invocations", []))

    def finished(self, run: str, task: str, fingerprint: dict[str, Any]) -> dict[str, Any] | None:
        """The stored row of (run, task) if it was made with ``fingerprint``; an error if it was
        made with other options (a rerun must not mix two settings under one run name)."""
        for row in self.rows:
            if row["run"] == run and row["task"] == task:
                stored = {k: row.get(k, LEGACY_DEFAULTS.get(k)) for k in fingerprint}
                if stored != _normalized(fingerprint):
                    changed = sorted(k for k in fingerprint if stored[k] != _normalized(fingerprint)[k])
                    raise ValueError(
                        f"{self.path} already holds run {run!r} on {task} made with other {', '.join(changed)}; "
                        "rename the run, or pass another --out (or delete that folder) to start afresh")
                return row
        return None

    def add(self, row: dict[str, Any]) -> None:
        self.rows = [r for r in self.rows if (r["run"], r["task"]) != (row["run"], row["task"])] + [_normalized(row)]

    def write_samples(self, run: str, task: str, records: list[dict[str, Any]]) -> None:
        text = "".join(json.dumps(r) + "\n" for r in records)
        atomic_write_bytes(samples_path(self.out_dir, run, task), gzip.compress(text.encode(), mtime=0))

    def start(self, meta: dict[str, Any]) -> None:
        """Record this invocation; ``meta`` describes the latest one, ``invocations`` all of them."""
        self.invocations.append({k: meta[k] for k in ("command", "time_utc", "git_commit")})
        self.meta = {**meta, "invocations": self.invocations}

    def write_summary(self, summary: dict[str, Any]) -> None:
        """summary.json (meta, rows, per-run means, PBx) and summary.csv, both atomically."""
        document = {"meta": self.meta, "rows": self.rows, **summary}
        atomic_write_text(self.path, summary_text(document))
        atomic_write_text(self.out_dir / "summary.csv", summary_csv(self.rows))


class ReadOnlyStore(ResultStore):
    """The folder as a tensor-parallel rank other than 0 sees it: the finished rows read back, so
    that every rank skips the same (run, task) pairs and decodes the same batches; nothing is
    written (rank 0 writes). The folder must be one every rank reads (one machine's disk)."""

    def write_samples(self, run: str, task: str, records: list[dict[str, Any]]) -> None:
        pass

    def write_summary(self, summary: dict[str, Any]) -> None:
        pass


def summary_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["run", "line", "task", "shots", "samples", "score", "nfe", "tpf", "draft_rows", "tokens_per_s"])
    for r in rows:
        w.writerow([r["run"], r["line"], r["task"], r.get("shots"), r["samples"], r["score"], f"{r['nfe']:.2f}",
                    f"{r['tpf']:.3f}", f"{r['draft_rows']:.2f}", r["tokens_per_s"]])
    return buf.getvalue()
