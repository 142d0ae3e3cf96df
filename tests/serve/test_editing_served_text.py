"""Under token editing a committed token may change until its window ends: the server sends a
row's text only once it lies before the active window, so a completion (streamed or not) is the
text ``generate`` gives for the same request (it used to send tokens a later edit rewrote)."""
from __future__ import annotations

import json

import httpx
import pytest

import dllm
from dllm.serve.requests import ServerDefaults
from serve_helpers import served_model

PROMPT = "Sort these names: Bob Smith, Alice Jones."
OPTIONS = dict(max_tokens=8, block_length=12, steps=1, policy="factor", temperature=0.8, top_p=0.9)


@pytest.fixture(scope="module")
def served():
    lm = dllm.load("dllm-waitingline-llada", device="cpu", dtype="float32")
    with served_model(lm, ServerDefaults(options={"edit_threshold": 0.0})) as (_, url):
        yield lm, url


@pytest.mark.parametrize("seed", [4, 7])  # seeds whose served text differed from generate's before
def test_served_text_under_editing_is_generates(served, seed):
    lm, url = served
    expected = lm.generate(PROMPT, seed=seed, chat=False, edit_threshold=0.0, **OPTIONS).texts[0]
    body = {"model": "m", "prompt": PROMPT, "seed": seed, **OPTIONS}
    plain = httpx.post(url + "/v1/completions", json=body, timeout=60).json()
    assert plain["choices"][0]["text"] == expected
    with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=60) as response:
        chunks = [line[len("data: "):] for line in response.iter_lines() if line.startswith("data: {")]
    assert "".join(json.loads(c)["choices"][0]["text"] for c in chunks) == expected
