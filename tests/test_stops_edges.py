"""Edges of the stop conditions the common cases do not reach: an end-of-text id also given as a
stop id, a stop string at the very start, the last id of the vocabulary, several stop strings
that could each still be forming, and a trailing partial character while streaming."""
import pytest

from dllm.api.stops import StopConditions, cut_at_stop, safe_text_length

VOCAB = {1: "a", 2: "b", 3: "c", 4: "<eos>"}


def text_of(ids):
    return "".join(VOCAB[i] for i in ids)


def test_an_end_of_text_id_asked_for_as_a_stop_id_ends_with_stop():
    out = cut_at_stop([1, 4, 2], text_of, [4], StopConditions.parse(None, [4]), complete=True)
    assert (out.text, out.ids, out.finish_reason) == ("a", [1], "stop")


def test_a_stop_string_at_the_start_leaves_nothing():
    out = cut_at_stop([3, 1, 2], text_of, [4], StopConditions.parse("c"), complete=True)
    assert (out.text, out.ids, out.finish_reason) == ("", [], "stop")


def test_the_last_id_of_the_vocabulary_is_a_stop_id_and_the_next_is_not():
    assert StopConditions.parse(None, [9], vocab_size=10).token_ids == (9,)
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        StopConditions.parse(None, [10], vocab_size=10)


@pytest.mark.parametrize("stops", [["abc", "bz"], ["bz", "abc"]])
def test_safe_text_holds_the_longest_tail_any_stop_could_grow_from(stops):
    """"xab" could become "xabc" (hold "ab") or "xabz" (hold "b"): "x" alone is safe, in either order."""
    assert safe_text_length("xab", StopConditions.parse(stops)) == 1


def test_safe_text_holds_a_trailing_partial_character():
    """A multi-byte character split over tokens decodes to U+FFFD until its last byte is final."""
    assert safe_text_length("ab\ufffd", StopConditions()) == 2
    assert safe_text_length("ab\ufffd\ufffd", StopConditions()) == 2
    assert safe_text_length("a\ufffdb", StopConditions()) == 3  # a settled replacement stays
