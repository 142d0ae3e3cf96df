"""RowText's stats: tokens and tpf counted over the answer as generate counts them (cut at a
stop, the ending id kept), a cancelled row keeping the scheduler's count."""
from __future__ import annotations

from dllm.api.stops import StopConditions
from dllm.serve.protocol import RowUpdate
from dllm.serve.rows import RowText

EOS = 9


def _row() -> RowText:
    return RowText(lambda ids: "".join(chr(97 + t) for t in ids if t != EOS), [EOS], StopConditions(), 100)


def test_tokens_per_forward_divide_by_the_forwards_charged():
    for nfe, ids, expected in [(1, [0, 1, EOS], 3.0), (2, [0, EOS, 3], 1.0), (4, [0, 1, 2], 0.75)]:
        row = _row()
        row.add(RowUpdate(request_id="r", final_ids=ids, finished=True, finish_reason="length",
                          stats={"nfe": nfe, "tokens": 3, "token_forwards": 0, "draft_rows": 0}))
        assert row.answer_stats["tpf"] == expected, (nfe, ids)


def test_a_cancelled_row_keeps_the_schedulers_token_count():
    row = _row()
    row.add(RowUpdate(request_id="r", final_ids=[0, 1], finished=True, finish_reason="cancelled",
                      stats={"nfe": 4, "tokens": 2, "token_forwards": 0, "draft_rows": 0}))
    assert row.answer_stats["tokens"] == 2 and row.answer_stats["tpf"] == 0.5
