"""The server with CUDA graphs (``ServerDefaults(options={"cuda_graphs": True})``, what
``dllm serve --cuda-graphs`` sets), the capture emulated on CPU as in tests/runner: answers equal
eager ``generate``'s, alone and in concurrent batches that rows join, and a request with another
prompt length replays the graphs the first one captured (canvas lengths are bucketed whole)."""
from __future__ import annotations

import concurrent.futures
import weakref

import openai
import pytest

import dllm
from dllm.runner import graphs
from dllm.serve.app import create_app
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import ServerDefaults
from serve_helpers import RecordingScheduler, running_server

OPTIONS = {"block_length": 8, "cache": "dual"}
PROMPTS = ["Alice Smith, Bob Jones, Carol White. Who is second?", "Reverse: Ann Lee, Tom Kay",
           "Who is last in the line: Sue Ray, Dan Fox, Amy Poe, Tim Orr?", "Count: one, two"]


@pytest.fixture()
def replaying(monkeypatch, test_device):
    if test_device == "cpu":
        monkeypatch.setattr(graphs, "BACKEND", graphs.EmulatedGraph)
    monkeypatch.setattr(graphs, "_RUNNERS", weakref.WeakKeyDictionary())


def _expected(model, prompt: str, max_tokens: int, seed: int) -> str:
    out = model.generate_ids([model.encode(prompt, chat=False)], seeds=[seed], max_tokens=max_tokens,
                             temperature=0.7, **OPTIONS)
    return out.texts[0]


def test_served_answers_replay_and_equal_eager_generate(replaying, test_device):
    model = dllm.load(device=test_device, dtype="float32")
    lengths = [len(model.encode(p, chat=False)) for p in PROMPTS]
    assert len(set(lengths)) == len(PROMPTS) and max(lengths) + 32 <= 64  # one captured canvas length
    scheduler = RecordingScheduler(model, SchedulerLimits(max_batch=8, max_queue=64))
    defaults = ServerDefaults(options={**OPTIONS, "cuda_graphs": True}, max_tokens=32)
    try:
        with running_server(create_app(model, scheduler, defaults=defaults, served_name="m")) as url:
            client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)

            def ask(i: int, max_tokens: int = 32) -> str:
                out = client.completions.create(model="m", prompt=PROMPTS[i], max_tokens=max_tokens, seed=i,
                                                temperature=0.7)
                return out.choices[0].text

            assert ask(0) == _expected(model, PROMPTS[0], 32, 0)
            first = graphs.graph_stats(model.model)
            assert ask(1) == _expected(model, PROMPTS[1], 32, 1)  # another prompt length: nothing captured
            second = graphs.graph_stats(model.model)
            assert second["captures"] == first["captures"] == 2 and second["replays"] > first["replays"]
            # concurrent requests of 8 to 32 tokens: batched, joined at block boundaries, rebuilt
            jobs = [(i, 8 * (1 + i)) for i in range(len(PROMPTS))]
            with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
                answers = list(pool.map(lambda job: ask(*job), jobs))
    finally:
        scheduler.close()
    assert answers == [_expected(model, PROMPTS[i], n, i) for i, n in jobs]
    stats = graphs.graph_stats(model.model)
    assert stats["eager_forwards"] == 0 and stats["replays"] > second["replays"]
    # whatever batches the timing made (rows joining, finishing, rebuilt; two batches alive at once
    # lease a slot each): one canvas length, so a refresh and a window graph per K/V slot, nothing more
    runner = graphs.graph_runner(model.model)
    assert {key.keys for key in runner.graphs} == {64} and stats["evicted_graphs"] == 0
    assert stats["captures"] == 2 * len({key.slot for key in runner.graphs}) == 2 * stats["kv_slots"]
