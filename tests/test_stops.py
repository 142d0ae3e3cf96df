"""Stop strings and stop ids cut the final prefix at the first stop, wherever it comes from."""
import pytest

from dllm.api.stops import StopConditions, cut_at_stop, safe_text_length
from dllm.validation import OptionTypeError

VOCAB = {1: "a", 2: "b", 3: "c", 4: "<eos>", 5: "\n"}


def text_of(ids):
    return "".join(VOCAB[i] for i in ids)


def test_earliest_stop_wins():
    stops = StopConditions.parse(["c", "\n"], [2])
    out = cut_at_stop([1, 1, 5, 2, 3], text_of, [4], stops, complete=True)
    assert (out.text, out.ids, out.finish_reason) == ("aa", [1, 1], "stop")
    out = cut_at_stop([1, 2, 5], text_of, [4], stops, complete=True)
    assert (out.text, out.ids, out.finish_reason) == ("a", [1], "stop")


def test_eos_and_length():
    none = StopConditions()
    assert cut_at_stop([1, 4, 2], text_of, [4], none, complete=True).finish_reason == "eos"
    assert cut_at_stop([1, 2], text_of, [4], none, complete=True).finish_reason == "length"
    assert cut_at_stop([1, 2], text_of, [4], none, complete=False).finish_reason is None


def test_stop_string_across_tokens_keeps_covering_ids():
    out = cut_at_stop([1, 2, 3, 1], text_of, [4], StopConditions.parse("bc"), complete=False)
    assert (out.text, out.ids, out.finish_reason) == ("a", [1], "stop")


def test_safe_text_holds_back_a_possible_stop_prefix():
    stops = StopConditions.parse(["abc"])
    assert safe_text_length("xxab", stops) == 2
    assert safe_text_length("xxa", stops) == 2
    assert safe_text_length("xxz", stops) == 3


@pytest.mark.parametrize("stop, ids, error", [
    (3, None, OptionTypeError), ([""], None, ValueError), (None, [1.5], OptionTypeError),
    (None, [99], ValueError), (None, 7, OptionTypeError),
])
def test_bad_stop_conditions_are_refused(stop, ids, error):
    with pytest.raises(error):
        StopConditions.parse(stop, ids, vocab_size=10)


def test_block_aligned_gen_length_and_sample_seeds():
    from dllm.engine.config import block_aligned_gen_length, sample_seeds
    assert block_aligned_gen_length(20, 8) == 24
    assert block_aligned_gen_length(24, 8) == 24
    assert block_aligned_gen_length(20, None) == 20
    assert sample_seeds(5, 3) == [5, 6, 7]
    assert sample_seeds(2**63 - 1, 2) == [2**63 - 1, 0]
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError):
            block_aligned_gen_length(bad, 8)
        with pytest.raises(ValueError):
            sample_seeds(0, bad)
