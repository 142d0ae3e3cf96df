"""A row whose text max_tokens decides stops there in ``generate``, ``stream`` and the server alike
(``dllm.api.decided``): the same text and the same nfe for the same request, with stop_at_eos on
or off. The text is decided in the forward that commits the first max_tokens + 1 answer positions
(the last of them could have been an end-of-text), read from the whole canvas's decode order."""
from __future__ import annotations

import httpx
import pytest

from dllm.serve.requests import ServerDefaults
from serve_helpers import served_model

PROMPT = "hello world, the list is long"
MAX_TOKENS, BLOCK = 2, 16  # one block of 16 answer positions, the answer cut at 2


@pytest.fixture(scope="module")
def served(tiny_models):
    model = tiny_models["llada"]
    with served_model(model, ServerDefaults(options={"block_length": BLOCK}, max_tokens=BLOCK)) as (_, url):
        yield model, url


@pytest.mark.parametrize("stop_at_eos", [True, False])
def test_max_tokens_stops_the_row_alike_everywhere(served, stop_at_eos):
    model, url = served
    options = dict(chat=False, block_length=BLOCK, stop_at_eos=stop_at_eos, seed=5)
    whole = model.generate(PROMPT, max_tokens=BLOCK, **options)
    head = whole.token_ids[0][: MAX_TOKENS + 1]
    assert len(head) == MAX_TOKENS + 1 and not set(head) & set(model.model.eos_token_ids)
    decided_at = max(whole.decode_order[0][: MAX_TOKENS + 1])  # the forward (from 1) that made them all final
    assert decided_at < whole.stats[0]["nfe"]  # else this request could not tell stopping from decoding on

    cut = model.generate(PROMPT, max_tokens=MAX_TOKENS, **options)
    streamed = list(model.stream(PROMPT, max_tokens=MAX_TOKENS, **options))[-1]
    body = {"model": "m", "prompt": PROMPT, "max_tokens": MAX_TOKENS, "block_length": BLOCK,
            "stop_at_eos": stop_at_eos, "seed": 5}
    choice = httpx.post(url + "/v1/completions", json=body, timeout=60).json()["choices"][0]
    text = model.tokenizer.decode(head[:MAX_TOKENS], skip_special_tokens=False)
    assert cut.texts[0] == streamed.final_text == choice["text"] == text
    assert cut.stats[0]["nfe"] == streamed.stats["nfe"] == choice["dllm"]["stats"]["nfe"] == decided_at


def test_token_editing_decodes_the_whole_canvas(served):
    """Editing may rewrite a committed token until its window ends: no row is decided early."""
    model, _ = served
    options = dict(chat=False, block_length=BLOCK, stop_at_eos=False, seed=5, edit_threshold=0.5)
    whole = model.generate(PROMPT, max_tokens=BLOCK, **options)
    cut = model.generate(PROMPT, max_tokens=MAX_TOKENS, **options)
    assert cut.stats[0]["nfe"] == whole.stats[0]["nfe"] and cut.token_ids[0] == whole.token_ids[0][:MAX_TOKENS]
