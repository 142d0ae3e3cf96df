"""RowText: text handed out piece by piece, however the final ids arrive, adds up to the whole
answer cut at its stops; a tail that may become a stop string is held back."""
from __future__ import annotations

import random

import pytest

from dllm.api.outputs import end_row
from dllm.api.request import OutputRequest
from dllm.engine.logprobs import TokenLogprob
from dllm.serve.protocol import RowUpdate
from dllm.serve.rows import RowText
from dllm.api.stops import StopConditions

VOCAB = ["a", "b", "ab", "ST", "OP", " ", "\u00e9", "x"]
EOS = 99


def decode(ids):
    return "".join(VOCAB[t] for t in ids if t != EOS)


def feed(ids, chunks, stops, max_tokens, finish="length"):
    row = RowText(decode, [EOS], stops, max_tokens)
    pieces, start = [], 0
    for size in chunks:
        row.add(RowUpdate(request_id="r", final_ids=ids[start : start + size]))
        start += size
        pieces.append(row.take_text())
        if row.done:
            return row, pieces
    row.add(RowUpdate(request_id="r", finished=True, finish_reason=finish))
    pieces.append(row.take_text())
    return row, pieces


@pytest.mark.parametrize("trial", range(40))
def test_streamed_pieces_add_up_to_the_whole_cut(trial):
    rng = random.Random(trial)
    ids = [rng.randrange(len(VOCAB)) for _ in range(rng.randrange(1, 30))]
    max_tokens = rng.randrange(1, 40)
    if rng.random() < 0.3:
        ids.insert(rng.randrange(len(ids) + 1), EOS)
    elif rng.random() < 0.2:  # an answer of exactly max_tokens tokens, then end-of-text
        ids.insert(min(max_tokens, len(ids)), EOS)
    stops = StopConditions.parse(rng.choice([None, "STOP", ["ab ", "x"], "\u00e9x"]))
    chunks = [rng.randrange(0, 4) for _ in range(40)]
    row, pieces = feed(ids, chunks, stops, max_tokens)
    whole, kept = end_row(ids, decode, [EOS], OutputRequest(stops=stops, max_tokens=max_tokens))  # generate's cut
    assert "".join(pieces) == whole.text
    assert row.reason == whole.finish_reason
    assert row.cut.ids == whole.ids
    assert row.token_ids == kept  # generate's token_ids: the end-of-text that ended the row kept


def test_an_answer_of_exactly_max_tokens_then_end_of_text_ends_as_in_generate():
    ids = [0, 1, 2, EOS, 1]
    row, _ = feed(ids, [1, 1, 1, 1, 1], StopConditions(), max_tokens=3)
    whole, _ = end_row(ids, decode, [EOS], OutputRequest(max_tokens=3))
    assert row.reason == whole.finish_reason == "eos"
    assert row.cut.text == whole.text == "abab"


def test_stream_keeps_the_ending_stop_id_as_generate_does(tiny_models):
    lm = tiny_models["llada"]
    options = dict(gen_length=16, block_length=8, seed=7)
    plain = lm.generate("hello there", chat=False, **options).token_ids[0]
    stop_id = next(t for t in plain[2:] if t not in lm.model.eos_token_ids)  # a token after the start
    out = lm.generate("hello there", chat=False, stop_token_ids=[stop_id], **options)
    last = list(lm.stream("hello there", chat=False, stop_token_ids=[stop_id], **options))[-1]
    assert out.finish_reasons[0] == last.finish_reason == "stop"
    assert last.final_ids == out.token_ids[0] and last.final_ids[-1] == stop_id
    assert last.final_text == out.texts[0]


def test_a_possible_stop_is_held_back_until_decided():
    stops = StopConditions.parse("STOP")
    row = RowText(decode, [EOS], stops, 100)
    row.add(RowUpdate(request_id="r", final_ids=[0, 3]))  # "aST": "ST" may begin "STOP"
    assert row.take_text() == "a"
    row.add(RowUpdate(request_id="r", final_ids=[4]))  # "aSTOP"
    assert row.done and row.reason == "stop" and row.take_text() == ""
    assert row.openai_finish_reason == "stop"


def test_a_row_ended_by_the_scheduler_keeps_its_reason():
    row = RowText(decode, [EOS], StopConditions(), 100)
    row.add(RowUpdate(request_id="r", final_ids=[0]))
    row.add(RowUpdate(request_id="r", finished=True, finish_reason="cancelled"))
    assert row.reason == "cancelled" and row.take_text() == "a"


def test_logprobs_go_out_with_their_tokens_text():
    """A token's logprob is handed out once all of its text has gone out: "b" may begin the stop
    "bz", so its text and its logprob wait until "x" shows it is not one."""
    row = RowText(decode, [EOS], StopConditions.parse("bz"), 10)
    first = [TokenLogprob(-0.1, []), TokenLogprob(-0.2, [])]
    row.add(RowUpdate(request_id="r", final_ids=[0, 1], logprobs=first))  # "a", "b"
    assert row.take_text() == "a" and row.take_logprobs() == first[:1]
    then = [TokenLogprob(-0.3, [])]
    row.add(RowUpdate(request_id="r", final_ids=[7], logprobs=then))  # "x"
    assert row.take_text() == "bx" and row.take_logprobs() == first[1:] + then
