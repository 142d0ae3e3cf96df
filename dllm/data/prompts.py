"""ParallelBench task specs and prompts, built exactly as the benchmark (v0) builds them.

User message = ``prompt.format(**sample["input"]).replace("\\n", "\n")``; with one shot, the
example is a prior user turn plus an assistant turn (``answer`` if a string, else
``answer["example"]``).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

# ParallelBench's max_tokens per task family
MAX_TOKENS = {"waiting_line": 32, "puzzle": 64, "words_to_sentence": 64, "paraphrase_summarize": 64}


def default_data_dir() -> Path:
    """$DLLM_PARALLELBENCH_DIR, else ../shared/data/parallelbench beside the repository."""
    env = os.environ.get("DLLM_PARALLELBENCH_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2].parent / "shared" / "data" / "parallelbench"


@dataclass(kw_only=True, slots=True)
class TaskSpec:
    name: str  # e.g. "waiting_line/copy"
    prompt: str
    metric: str
    max_tokens: int
    path: Path  # the task's JSONL file


def _jsonl_name(folder: str, key: str, entry: dict) -> str:
    """waiting_line/copy -> copy.jsonl; puzzle/sudoku_n4_12 -> sudoku_n4_12.jsonl."""
    return key.split("/", 1)[1] + ".jsonl"


def load_task_configs(data_dir: Path) -> dict[str, TaskSpec]:
    """Every task of every task_config.yaml under data_dir."""
    specs: dict[str, TaskSpec] = {}
    for cfg_file in sorted(Path(data_dir).glob("*/task_config.yaml")):
        folder = cfg_file.parent.name
        for key, entry in yaml.safe_load(cfg_file.read_text()).items():
            path = cfg_file.parent / _jsonl_name(folder, key, entry)
            if path.is_file():
                specs[key] = TaskSpec(name=key, prompt=entry["prompt"], metric=entry["metric"],
                                      max_tokens=MAX_TOKENS.get(folder, 64), path=path)
    if not specs:
        raise FileNotFoundError(f"no ParallelBench task_config.yaml files under {data_dir}; pass the official data dir")
    return specs


def load_samples(data_dir: Path, task: str) -> list[dict]:
    spec = load_task_configs(data_dir)[task]
    return [json.loads(line) for line in spec.path.read_text().splitlines() if line.strip()]


def user_message(spec: TaskSpec, inputs: dict) -> str:
    fields = {k: v for k, v in inputs.items() if k != "icl_examples"}
    return spec.prompt.format(**fields).replace("\\n", "\n")


def build_messages(spec: TaskSpec, sample: dict, shots: int = 0) -> list[dict]:
    """Chat messages for one sample, with ``shots`` (0 or 1) example turns first."""
    if shots not in (0, 1):
        raise ValueError(f"shots must be 0 or 1, got {shots}")
    messages: list[dict] = []
    if shots:
        examples = sample["input"].get("icl_examples") or []
        if not examples:
            raise ValueError(f"task {spec.name} has no one-shot example; use shots=0")
        ex = examples[0]
        answer = ex["answer"] if isinstance(ex["answer"], str) else ex["answer"]["example"]
        messages += [{"role": "user", "content": user_message(spec, ex["input"])},
                     {"role": "assistant", "content": answer}]
    messages.append({"role": "user", "content": user_message(spec, sample["input"])})
    return messages
