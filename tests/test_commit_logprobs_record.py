"""``CommitLogprobs`` records a commit's logprob only where it can name the forward: the logits of
the canvas rows' own forward, the window they cover and the positions the commit wrote; every
other answer position stays NaN, and a row reads as many alternatives as it asked for. Expected
values are log-softmaxes worked out with ``math``. An edit is recorded like a commit: under greedy
token editing each reported token is the top alternative of the forward that last wrote it."""
from __future__ import annotations

import math

import pytest
import torch

from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.engine.logprobs import MAX_TOP_LOGPROBS, CommitLogprobs, check_logprobs
from dllm.models.tiny import write_tiny_checkpoint

LOGITS = [[[2.0, 0.0, 1.0], [0.5, 3.0, -1.0]]]  # (1 row, a window of 2, vocabulary 3)


def _log_softmax(row: list[float]) -> list[float]:
    norm = math.log(sum(math.exp(x) for x in row))
    return [x - norm for x in row]


def _recorded(mask, rows=None, batch=1, offset=1, logits=LOGITS, top=2) -> CommitLogprobs:
    record = CommitLogprobs(1, 5, top=top, device=torch.device("cpu"))
    record.saw(torch.tensor(logits), None if rows is None else torch.tensor(rows), batch)
    record.committed(torch.tensor(mask), torch.tensor([[0, 1]]), offset)
    return record


def test_a_commit_records_its_forwards_logprobs_at_its_positions_only():
    entries = _recorded([[True, True]]).read(0, 0, 5, 2)
    first, second = _log_softmax(LOGITS[0][0]), _log_softmax(LOGITS[0][1])
    assert entries[1].logprob == pytest.approx(first[0]) and entries[2].logprob == pytest.approx(second[1])
    assert [i for i, _ in entries[1].top] == [0, 2] and [v for _, v in entries[1].top] == pytest.approx([first[0], first[2]])
    assert [i for i, _ in entries[2].top] == [1, 0]
    assert all(math.isnan(entries[at].logprob) for at in (0, 3, 4))  # before and after the window
    assert all(math.isnan(v) for at in (0, 3, 4) for _, v in entries[at].top)


def test_positions_the_commit_did_not_write_stay_nan():
    entries = _recorded([[False, True]]).read(0, 0, 5, 2)
    assert math.isnan(entries[1].logprob) and entries[2].logprob == pytest.approx(_log_softmax(LOGITS[0][1])[1])


@pytest.mark.parametrize("case", [
    dict(rows=[True]),                      # a forward over chosen rows (candidates), not the canvas rows
    dict(batch=2),                          # logits of another number of rows
    dict(logits=[[[2.0, 0.0, 1.0]]]),       # a window of another width
])
def test_a_commit_it_cannot_attribute_to_one_canvas_forward_stays_nan(case):
    entries = _recorded([[True, True]], **case).read(0, 0, 5, 2)
    assert all(math.isnan(entry.logprob) for entry in entries)


def test_a_row_reads_the_alternatives_it_asked_for():
    record = _recorded([[True, True]], top=3)
    assert [len(entry.top) for entry in record.read(0, 1, 3, 1)] == [1, 1]
    assert [len(entry.top) for entry in record.read(0, 1, 3, 0)] == [0, 0]


def test_top_is_an_integer_from_0_to_the_maximum():
    config = GenerationConfig()
    for top in (0, MAX_TOP_LOGPROBS):
        check_logprobs(top, config)
    for top in (-1, MAX_TOP_LOGPROBS + 1, True, 1.0):
        with pytest.raises(ValueError, match=rf"logprobs must be an integer in \[0, {MAX_TOP_LOGPROBS}\]"):
            check_logprobs(top, config)


def test_an_edited_token_reports_the_forward_that_edited_it(tmp_path):
    """Greedy commits and edits both write the forward's most likely token, so each reported token
    is its entry's first alternative; an edit recorded as the earlier commit would report the
    token it replaced."""
    import dllm

    model = dllm.load(write_tiny_checkpoint(tmp_path, "llada2_moe", seed=3), device="cpu", dtype="float32").model
    config = GenerationConfig(gen_length=32, block_length=32, policy="threshold", policy_args={"tau": 0.05},
                              edit_threshold=0.1, max_post_steps=3)  # tests/test_token_editing.py's: edits happen
    out = decode(model, [[5, 17, 42], list(range(30, 70))], config, logprobs=1)
    assert int(out.edits.sum()) > 0
    for row, answer in enumerate(out.answer.tolist()):
        for token, entry in zip(answer, out.logprobs.read(row, 0, len(answer), 1)):
            assert entry.top[0][0] == token and entry.logprob == pytest.approx(entry.top[0][1])
