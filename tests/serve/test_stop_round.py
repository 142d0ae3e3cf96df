"""A stop (a string or an id) that decides a row's text stops the row in that round in the
server's scheduler, as ``generate`` and ``stream`` stop theirs: the same nfe, every time. The front
used to cancel the row after reading its text, a cancel that landed 0 to 2 rounds late by thread
timing, so the server reported more forwards than ``generate`` for the same seeded request."""
from __future__ import annotations

import httpx
import pytest

from dllm.serve.requests import ServerDefaults
from dllm.serve.scheduler import BatchScheduler
from serve_helpers import served_model

PROMPT = "hello world, the list is long"
BLOCK = 16


class LateCancels(BatchScheduler):
    """The real scheduler where the front's cancels land too late to matter (the worst timing of
    a cancel sent from the event loop): a stop must stop its row in the scheduler itself."""

    def cancel(self, request_id: str) -> None:
        pass


@pytest.fixture(scope="module")
def served(tiny_models):
    model = tiny_models["llada"]
    defaults = ServerDefaults(options={"block_length": BLOCK}, max_tokens=BLOCK)
    with served_model(model, defaults, LateCancels) as (_, url):
        yield model, url


@pytest.mark.parametrize("stop_kind", ["string", "token_id"])
def test_the_server_stops_a_row_in_the_round_its_stop_is_final(served, stop_kind):
    model, url = served
    options = dict(chat=False, block_length=BLOCK, stop_at_eos=False, seed=5)
    whole = model.generate(PROMPT, max_tokens=BLOCK, **options)
    ids, order, nfe = whole.token_ids[0], whole.decode_order[0], whole.stats[0]["nfe"]
    # the first answer index past 0 holding a token new to the text, its prefix final before the last forward
    k = next(k for k in range(1, len(ids)) if ids[k] not in ids[:k] and max(order[: k + 1]) < nfe)
    token = model.tokenizer.decode([ids[k]], skip_special_tokens=False)
    stop = {"stop": [token]} if stop_kind == "string" else {"stop_token_ids": [ids[k]]}
    decided_at = max(order[: k + 1])  # the forward (from 1) that made the stop and all before it final
    cut = model.generate(PROMPT, max_tokens=BLOCK, **stop, **options)
    assert cut.stats[0]["nfe"] == decided_at < nfe
    body = {"model": "m", "prompt": PROMPT, "max_tokens": BLOCK, "block_length": BLOCK, "stop_at_eos": False,
            "seed": 5, **stop}
    choice = httpx.post(url + "/v1/completions", json=body, timeout=60).json()
    got = choice["choices"][0]
    assert (got["text"], got["dllm"]["finish_reason"], got["dllm"]["stats"]["nfe"]) == (cut.texts[0], "stop", decided_at)
    assert choice["usage"]["completion_tokens"] == len(cut.token_ids[0])
