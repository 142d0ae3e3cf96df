"""ParallelBench task specs and chat prompts, built exactly as the benchmark (v0) builds them.

User message = ``prompt.format(**sample["input"]).replace("\\n", "\n")`` (the sudoku template
spells its newlines as literal backslash-n). A one-shot example is a prior user turn plus an
assistant turn holding ``answer`` if a string, else ``answer["example"]``. The official files
are read from a directory given by the caller; nothing of them ships with dllm.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

# The repository checkout this package lives in (dllm/data/prompts.py -> repo root).
_REPO_ROOT = Path(__file__).resolve().parents[2]

# ParallelBench's max_tokens per task folder (the n=15 waiting-line runs used 128).
MAX_TOKENS = {"waiting_line": 32, "waiting_line_n15": 128, "puzzle": 64,
              "words_to_sentence": 64, "paraphrase_summarize": 64}


DATA_DIR_ENV = "DLLM_PARALLELBENCH_DIR"


def default_data_dir() -> Path:
    """$DLLM_PARALLELBENCH_DIR if set, else ``../shared/data/parallelbench`` beside a source checkout.

    The official files never ship with dllm, so an installed package has no default: without
    the variable and without that checkout folder this raises an error naming both ways to
    point at the data (``--data DIR`` or the environment variable).
    """
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV])
    beside_checkout = _REPO_ROOT.parent / "shared" / "data" / "parallelbench"
    if beside_checkout.is_dir():
        return beside_checkout
    raise FileNotFoundError(
        "no ParallelBench data directory given: pass --data DIR (the official data folder with "
        f"waiting_line/, puzzle/, ... and their task_config.yaml) or set {DATA_DIR_ENV}=DIR")


@dataclass(kw_only=True, slots=True)
class TaskSpec:
    """One benchmark task as its task_config.yaml entry describes it."""

    name: str  # the config key, e.g. "waiting_line/copy" or "puzzle/sudoku_n4_12"
    prompt: str  # str.format template over sample["input"]
    metric: str  # a name known to dllm.bench.metrics.score
    max_tokens: int  # generation length the benchmark used
    path: Path  # the task's JSONL file
    icl_example_count: int = 0  # one-shot examples the benchmark's protocol prepends (0: zero-shot)


def load_task_configs(data_dir: Path) -> dict[str, TaskSpec]:
    """Every task of every ``*/task_config.yaml`` under ``data_dir`` whose JSONL is present.

    Tasks are named by their config key (the ``name`` field is unreliable: sudoku_n4_12 says
    ``puzzle/sudoku_4x4_4``); configs listing unshipped variants (W2S ``_n3`` ...) are skipped.
    """
    specs: dict[str, TaskSpec] = {}
    for cfg_file in sorted(Path(data_dir).glob("*/task_config.yaml")):
        folder = cfg_file.parent.name
        for key, entry in (yaml.safe_load(cfg_file.read_text()) or {}).items():
            path = cfg_file.parent / f"{key.split('/', 1)[1]}.jsonl"
            if path.is_file():
                specs[key] = TaskSpec(name=key, prompt=entry["prompt"], metric=entry["metric"],
                                      max_tokens=MAX_TOKENS.get(folder, 64), path=path,
                                      icl_example_count=int(entry.get("icl_example_count") or 0))
    if not specs:
        raise FileNotFoundError(f"no ParallelBench task_config.yaml with data under {data_dir}; "
                                "pass the official data directory or set DLLM_PARALLELBENCH_DIR")
    return specs


def load_samples(data_dir: Path, task: str) -> list[dict]:
    """The official samples of ``task`` (e.g. "waiting_line/copy"), in file order."""
    specs = load_task_configs(data_dir)
    if task not in specs:
        raise ValueError(f"unknown task {task!r}; known: {sorted(specs)}")
    return [json.loads(line) for line in specs[task].path.read_text().splitlines() if line.strip()]


def user_message(spec: TaskSpec, inputs: dict) -> str:
    """The user turn for one sample's ``input`` dict (unused keys such as icl_examples ignored)."""
    return spec.prompt.format(**inputs).replace("\\n", "\n")


def build_messages(spec: TaskSpec, sample: dict, shots: int | None = 0) -> list[dict]:
    """Chat messages for one sample, preceded by up to ``shots`` example exchanges.

    Examples come from ``sample["input"]["icl_examples"]``; tasks that ship none (Text Writing,
    zero-shot in the benchmark) get none, so ``shots=1`` mirrors the paper's setting.
    ``shots=None`` follows the benchmark's protocol: the task's ``icl_example_count``.
    """
    if shots is None:
        shots = spec.icl_example_count
    if shots < 0:
        raise ValueError(f"shots must be >= 0, got {shots}")
    messages: list[dict] = []
    for example in (sample["input"].get("icl_examples") or [])[:shots]:
        answer = example["answer"]
        messages += [{"role": "user", "content": user_message(spec, example["input"])},
                     {"role": "assistant", "content": answer if isinstance(answer, str) else answer["example"]}]
    messages.append({"role": "user", "content": user_message(spec, sample["input"])})
    return messages
