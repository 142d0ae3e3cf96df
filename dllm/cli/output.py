"""Where command output goes: results on stdout, diagnostics through ``logging`` on stderr,
progress bars on stderr (only on a terminal, never with -q), an ``--out`` checked before any work."""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

LOGGER_NAME = "dllm"


class _Formatter(logging.Formatter):
    """INFO lines as written (a stats line reads like output); others prefixed ``dllm: warning:``,
    or with the command a record names (``extra={"prog": "dllm chat"}``), as ``main`` prints bad input."""

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        if record.levelno == logging.INFO:
            return message
        return f"{getattr(record, 'prog', 'dllm')}: {record.levelname.lower()}: {message}"


def configure_logging(verbose: int = 0, quiet: bool = False) -> None:
    """INFO by default, DEBUG with -v, WARNING with -q; one stderr handler on the ``dllm`` logger."""
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    logger = logging.getLogger(LOGGER_NAME)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def show_progress(quiet: bool) -> bool:
    """Progress bars only for a person watching: stderr is a terminal and -q was not given."""
    return not quiet and sys.stderr.isatty()


def progress_bar(total: int, *, desc: str, quiet: bool, unit: str = "prompt", enabled: bool = True,
                 delay: float = 0.0):
    """A tqdm bar on stderr (call ``update(n)``, then ``close()``); inert unless ``show_progress``
    and ``enabled`` (e.g. only on rank 0 of a torchrun); drawn only after ``delay`` seconds."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False, delay=delay,
                disable=not (enabled and show_progress(quiet)))


def check_output_dir(path: str | Path, option: str = "--out") -> Path:
    """Refuse, before any work, an output directory that could not be written: a file, a path
    under a file, a directory without write permission. Nothing is created here (a run that
    fails on its input leaves no empty directory); the command creates it when it writes."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{option} {out} is a file; pass a directory path (it is created if missing)")
    existing = out
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing != out and not existing.is_dir():
        raise ValueError(f"{option} {out} cannot be created: {existing} is a file; pass a directory path")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {out} cannot be written ({existing} is not writable); "
                         "pass a directory you can write to")
    return out
