"""RowText: text handed out piece by piece, however the final ids arrive, adds up to the whole
answer cut at its stops; a tail that may become a stop string is held back."""
from __future__ import annotations

import random

import pytest

from dllm.serve.protocol import RowUpdate
from dllm.serve.rows import RowText
from dllm.stops import StopConditions, cut_at_stop

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
    if rng.random() < 0.3:
        ids.insert(rng.randrange(len(ids) + 1), EOS)
    stops = StopConditions.parse(rng.choice([None, "STOP", ["ab ", "x"], "\u00e9x"]))
    max_tokens = rng.randrange(1, 40)
    chunks = [rng.randrange(0, 4) for _ in range(40)]
    row, pieces = feed(ids, chunks, stops, max_tokens)
    whole = cut_at_stop(ids[:max_tokens], decode, [EOS], stops, complete=True)
    assert "".join(pieces) == whole.text
    assert row.reason == whole.finish_reason
    assert row.cut.ids == whole.ids


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
