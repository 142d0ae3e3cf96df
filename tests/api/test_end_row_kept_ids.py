"""A finished row's ``token_ids`` (``outputs.end_row``): the ids of its text plus the end-of-text or
stop id that ended it, and nothing more: never past ``max_tokens``, and not after a stop string
(the row ended at the string, not at the id that follows it). Read with a vocabulary of whole
strings, so every expected list is written by hand."""
from __future__ import annotations

from dllm.api.outputs import end_row
from dllm.api.request import OutputRequest
from dllm.api.stops import StopConditions

VOCAB = ["a", "b", "cd", "x"]
EOS, STOP_ID = 98, 99


def decode(ids):
    return "".join(VOCAB[t] for t in ids if t < len(VOCAB))


def test_an_answer_of_exactly_max_tokens_keeps_max_tokens_ids():
    """The end-of-text at index max_tokens gives the reason "eos" but is not a kept id: the
    answer keeps max_tokens tokens."""
    stopped, kept = end_row([0, 1, 2, EOS, 3], decode, [EOS], OutputRequest(max_tokens=3))
    assert (stopped.text, stopped.finish_reason) == ("abcd", "eos")
    assert kept == [0, 1, 2]
    stopped, kept = end_row([0, 1, EOS, 3], decode, [EOS], OutputRequest(max_tokens=3))
    assert kept == [0, 1, EOS]  # below max_tokens the ending end-of-text is kept


def test_an_id_after_a_stop_string_is_not_kept():
    """"d" is a stop string inside the token "cd": the text ends at "abc" and the ids keep "cd"
    (the token whose text holds it), not the end-of-text or stop id after it."""
    for end in (EOS, STOP_ID):
        request = OutputRequest(stops=StopConditions(strings=("d",), token_ids=(STOP_ID,)))
        stopped, kept = end_row([0, 1, 2, end, 3], decode, [EOS], request)
        assert (stopped.text, stopped.finish_reason) == ("abc", "stop")
        assert kept == [0, 1, 2]
    request = OutputRequest(stops=StopConditions(strings=("cd",), token_ids=(STOP_ID,)))
    stopped, kept = end_row([0, 1, 2, STOP_ID], decode, [EOS], request)
    assert (stopped.text, kept) == ("ab", [0, 1])  # a string on a token boundary: the ids end before it
