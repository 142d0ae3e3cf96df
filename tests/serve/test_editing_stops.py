"""Under token editing ``generate`` decodes a row's whole canvas whatever its stops (a committed
token may change until its window ends, so no row is decided early: ``dllm.api.decided``); the
server's row did the same for max_tokens but was cancelled once a stop lay in its final text, so it
reported fewer forwards than ``generate`` for the same request. Now both report the same text,
finish reason and nfe, streamed or not."""
from __future__ import annotations

import json

import httpx
import pytest

from dllm.serve.requests import ServerDefaults
from serve_helpers import served_model

PROMPT = "hello world, the list is long"
BLOCK, MAX_TOKENS, EDIT = 8, 32, 0.5  # four blocks: a stop in the first leaves three to decode


@pytest.fixture(scope="module")
def served(tiny_models):
    model = tiny_models["llada"]
    defaults = ServerDefaults(options={"block_length": BLOCK, "edit_threshold": EDIT}, max_tokens=MAX_TOKENS)
    with served_model(model, defaults) as (_, url):
        yield model, url


def _served(url: str, body: dict, stream: bool) -> tuple[str, str, int]:
    """(text, dllm finish reason, nfe) of one choice, whole or streamed."""
    if not stream:
        choice = httpx.post(url + "/v1/completions", json=body, timeout=60).json()["choices"][0]
        return choice["text"], choice["dllm"]["finish_reason"], choice["dllm"]["stats"]["nfe"]
    with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=60) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
    last = chunks[-1]["choices"][0]["dllm"]
    return "".join(c["choices"][0]["text"] for c in chunks), last["finish_reason"], last["stats"]["nfe"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("stop_kind", ["string", "token_id"])
def test_a_stop_under_editing_costs_what_generate_costs(served, stop_kind, stream):
    model, url = served
    options = dict(chat=False, block_length=BLOCK, stop_at_eos=False, seed=5, edit_threshold=EDIT)
    whole = model.generate(PROMPT, max_tokens=MAX_TOKENS, **options)
    ids = whole.token_ids[0]
    k = next(k for k in range(1, BLOCK) if ids[k] not in ids[:k])  # a token first made in the first block
    token = model.tokenizer.decode([ids[k]], skip_special_tokens=False)
    stop = {"stop": [token]} if stop_kind == "string" else {"stop_token_ids": [ids[k]]}
    cut = model.generate(PROMPT, max_tokens=MAX_TOKENS, **stop, **options)
    assert cut.finish_reasons[0] == "stop" and cut.stats[0]["nfe"] == whole.stats[0]["nfe"]  # the whole canvas
    body = {"model": "m", "prompt": PROMPT, "max_tokens": MAX_TOKENS, "stop_at_eos": False, "seed": 5, **stop}
    assert _served(url, body, stream) == (cut.texts[0], "stop", cut.stats[0]["nfe"])
