"""Where the official ParallelBench files are; tests skip with a message when they are absent."""
from __future__ import annotations

import json

import pytest

from dllm.data.prompts import default_data_dir

DATA_DIR = default_data_dir()


def require_data():
    if not (DATA_DIR / "first_last_names.yaml").is_file():
        pytest.skip(f"ParallelBench data not found at {DATA_DIR} (set DLLM_PARALLELBENCH_DIR)")
    return DATA_DIR


def official(task: str) -> list[dict]:
    folder, name = task.split("/")
    return [json.loads(line) for line in (require_data() / folder / f"{name}.jsonl").read_text().splitlines()]
