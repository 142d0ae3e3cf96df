"""The bundled models answer the same at any gen length: one prompt decoded on 32-, 64- and
128-token canvases (one token per step) gives one answer, the right one. Models trained on a
single canvas length learn where the answer ends from the canvas instead, and add stray text or
nothing at all on a longer one."""
from __future__ import annotations

import random

import pytest

import dllm
from dllm.engine.config import GenerationConfig
from dllm.data.names import load_names
from dllm.data.prompts import build_messages, load_task_configs
from dllm.data.waiting_line import generate_waiting_line
from dllm.train.corpus import answer_text
from tests.pb_data import require_data

LENGTHS = (32, 64, 128)


def _prompts(task: str, count: int = 3) -> tuple[list[list[dict]], list[str]]:
    data = require_data()
    spec = load_task_configs(data)[f"waiting_line/{task}"]
    rng, names = random.Random(3_000_000), load_names(data)  # a seed no training run draws from
    samples = [generate_waiting_line(task, rng, names, rng.randint(3, 6)) for _ in range(count)]
    return [build_messages(spec, s, shots=0) for s in samples], [answer_text(s) for s in samples]


@pytest.mark.parametrize("name", ["dllm-waitingline-llada", "dllm-waitingline-dream", "dllm-waitingline-bd",
                                  "dllm-waitingline-moe"])
@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_one_prompt_gives_one_answer_at_every_gen_length(name, task):
    lm = dllm.load(name)
    messages, expected = _prompts(task)
    for length in LENGTHS:
        out = lm.generate(messages, GenerationConfig(gen_length=length, steps=length, policy="low_confidence"))
        assert [t.strip() for t in out.texts] == expected, f"gen length {length}"
