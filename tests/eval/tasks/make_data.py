"""Writes the documents of the local lm-eval tasks from dllm's own waiting-line generator.

    DLLM_PARALLELBENCH_DIR=DIR python tests/eval/tasks/make_data.py

Needs the ParallelBench folder for the name pool and the reverse task's prompt template; lists
equal to an official test input are redrawn, and the seeds are not the benchmark's.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from dllm.data.names import load_names
from dllm.data.prompts import build_messages, default_data_dir, load_task_configs
from dllm.data.waiting_line import generate_waiting_line, list_to_str, official_test_contexts

HERE = Path(__file__).resolve().parent


def reverse_docs(data_dir: Path, *, seed: int, per_length: int) -> list[dict]:
    """Waiting-line reverse samples, ``per_length`` for each list length 3..6, with the
    benchmark's zero-shot user message and three candidate answers for the multiple choice:
    the reverse (gold), the list as given, and another order of it."""
    rng = random.Random(seed)
    names, excluded = load_names(data_dir), official_test_contexts(data_dir)
    spec = load_task_configs(data_dir)["waiting_line/reverse"]
    docs = []
    for length in range(3, 7):
        made = 0
        while made < per_length:
            sample = generate_waiting_line("reverse", rng, names, length)
            if sample["input"]["context"] in excluded:
                continue
            items = json.loads(sample["input"]["context"])
            other = list(items)
            while other in (items, items[::-1]):
                rng.shuffle(other)
            choices = [sample["answer"], list_to_str(items), list_to_str(other)]
            rng.shuffle(choices)
            prompt = build_messages(spec, sample, shots=0)[-1]["content"]
            docs.append({"input": {**sample["input"], "prompt": prompt}, "answer": sample["answer"],
                         "prompt": prompt, "choices": choices, "gold": choices.index(sample["answer"]),
                         "shuffled_gold": rng.randrange(len(choices))})
            made += 1
    return docs


def main() -> None:
    docs = reverse_docs(default_data_dir(), seed=20251123, per_length=8)
    (HERE / "reverse.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))


if __name__ == "__main__":
    main()
