"""A row whose text max_tokens decides stops there in ``generate``, ``stream`` and the server alike
(``dllm.api.decided``): the same text and the same nfe for the same request, with stop_at_eos on
or off. The text is decided in the forward that commits the first max_tokens + 1 answer positions
(the last of them could have been an end-of-text), read from the whole canvas's decode order."""
from __future__ import annotations

import json

import httpx
import pytest

import dllm
from dllm.models.tiny import write_tiny_checkpoint
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


def _first_new_token(ids: list[int], order: list[int], nfe: int) -> int:
    """The first answer index past 0 whose token occurs nowhere before it and whose prefix (itself
    included) is final before the last forward: a stop there decides the text early."""
    return next(k for k in range(1, len(ids)) if ids[k] not in ids[:k] and max(order[: k + 1]) < nfe)


@pytest.mark.parametrize("stop_kind", ["token_id", "string", "length_beside_stops"])
def test_a_stop_decides_the_row_alike_everywhere(served, stop_kind):
    """With stops the decided check reads the text: a stop id or string in the final prefix, or
    max_tokens passed with stops that never occur, stops the row in that forward in generate and
    stream (the same text, the same nfe), not at the end of the canvas; the server's text is theirs."""
    model, url = served
    options = dict(chat=False, block_length=BLOCK, stop_at_eos=False, seed=5)
    whole = model.generate(PROMPT, max_tokens=BLOCK, **options)
    ids, order, nfe = whole.token_ids[0], whole.decode_order[0], whole.stats[0]["nfe"]

    def decode(tokens: list[int]) -> str:
        return model.tokenizer.decode(tokens, skip_special_tokens=False)

    if stop_kind == "length_beside_stops":
        request = dict(stop=["never in this text \x00"], max_tokens=MAX_TOKENS)
        text, decided_at = decode(ids[:MAX_TOKENS]), max(order[: MAX_TOKENS + 1])
    else:
        k = _first_new_token(ids, order, nfe)
        request = ({"stop_token_ids": [ids[k]]} if stop_kind == "token_id" else {"stop": [decode([ids[k]])]})
        assert decode([ids[k]]) and decode([ids[k]]) not in decode(ids[:k])  # the string first occurs at k
        request["max_tokens"] = BLOCK
        text, decided_at = decode(ids[:k]), max(order[: k + 1])
    assert decided_at < nfe
    cut = model.generate(PROMPT, **request, **options)
    streamed = list(model.stream(PROMPT, **request, **options))[-1]
    body = {"model": "m", "prompt": PROMPT, "block_length": BLOCK, "stop_at_eos": False, "seed": 5, **request}
    choice = httpx.post(url + "/v1/completions", json=body, timeout=60).json()["choices"][0]
    assert cut.texts[0] == streamed.final_text == choice["text"] == text
    # the server's scheduler stops the row itself in that round (test_stop_round.py pins it with
    # the front's cancel never landing)
    assert cut.stats[0]["nfe"] == streamed.stats["nfe"] == choice["dllm"]["stats"]["nfe"] == decided_at


@pytest.mark.parametrize("before", [0, 1])
def test_an_end_of_text_in_reach_of_max_tokens_decodes_on(served, tmp_path, before):
    """Without stops a row is decided once its final prefix passes max_tokens with no end-of-text
    in its first max_tokens + 1 tokens; one there (here at index k, max_tokens = k) ends the text
    stop_at_eos's way, so with stop_at_eos off the row decodes on to the canvas's end, alike in
    generate, stream and the server. max_tokens = k - 1 leaves it out of reach: decided early."""
    model, _ = served
    options = dict(chat=False, block_length=BLOCK, stop_at_eos=False, seed=5)
    plain = model.generate(PROMPT, max_tokens=BLOCK, **options)
    k = _first_new_token(plain.token_ids[0], plain.decode_order[0], plain.stats[0]["nfe"])
    path = write_tiny_checkpoint(tmp_path / "llada", "llada", seed=1)  # the served model's weights
    config = json.loads((path / "config.json").read_text())
    config["eos_token_id"] = plain.token_ids[0][k]  # an end-of-text first made at index k
    (path / "config.json").write_text(json.dumps(config))
    lm = dllm.load(path, device="cpu", dtype="float32")
    whole = lm.generate(PROMPT, max_tokens=BLOCK, **options)
    ids, order, nfe = whole.token_ids[0], whole.decode_order[0], whole.stats[0]["nfe"]
    assert k >= 1 and ids[k] in lm.model.eos_token_ids and not set(ids[:k]) & set(lm.model.eos_token_ids)
    max_tokens = k - before
    expected_nfe = nfe if before == 0 else max(order[:k])
    assert expected_nfe < nfe or before == 0
    request = dict(max_tokens=max_tokens, **options)
    cut = lm.generate(PROMPT, **request)
    streamed = list(lm.stream(PROMPT, **request))[-1]
    with served_model(lm, ServerDefaults(options={"block_length": BLOCK}, max_tokens=BLOCK)) as (_, url):
        body = {"model": "m", "prompt": PROMPT, "max_tokens": max_tokens, "block_length": BLOCK,
                "stop_at_eos": False, "seed": 5}
        choice = httpx.post(url + "/v1/completions", json=body, timeout=60).json()["choices"][0]
    text = lm.tokenizer.decode(ids[: min(k, max_tokens)], skip_special_tokens=False)
    assert cut.texts[0] == streamed.final_text == choice["text"] == text
    assert cut.stats[0]["nfe"] == streamed.stats["nfe"] == choice["dllm"]["stats"]["nfe"] == expected_nfe
