"""Where the official ParallelBench files are; tests skip with a message when they are absent."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from dllm.data.prompts import DATA_DIR_ENV, default_data_dir


def _data_dir() -> Path | None:
    try:
        return default_data_dir()
    except FileNotFoundError:
        return None


DATA_DIR = _data_dir()


def require_data():
    if DATA_DIR is None or not (DATA_DIR / "first_last_names.yaml").is_file():
        pytest.skip(f"ParallelBench data not found at {DATA_DIR} (set {DATA_DIR_ENV})")
    return DATA_DIR


def official(task: str) -> list[dict]:
    folder, name = task.split("/")
    return [json.loads(line) for line in (require_data() / folder / f"{name}.jsonl").read_text().splitlines()]
