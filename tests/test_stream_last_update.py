"""``stream``'s last update reports what ``generate`` reports for the row (its token count and one
logprob per kept id, the ending stop id's included), decodes an editing row to its end as
``generate`` does even when a stop is decided early, and its spans in flight count from the
answer start, never before it."""
from __future__ import annotations

from dllm import GenerationConfig
from dllm.api.streaming import blocks_in_flight
from dllm.engine.decoding import Decoding, RowStart
from tests.block_causal_tiny import tiny_block_causal

PROMPT = "hello there"


def test_last_update_counts_and_logprobs_are_generates(tiny_models):
    lm = tiny_models["llada"]
    plain = lm.generate(PROMPT, chat=False, gen_length=16, block_length=8, seed=7).token_ids[0]
    stop_id = next(t for t in plain[2:] if t not in lm.model.eos_token_ids)
    cases = [dict(max_tokens=3, block_length=4),  # the canvas holds 4: one committed token is cut
             dict(gen_length=16, block_length=8, stop_token_ids=[stop_id])]  # ends with its stop id
    for options in cases:
        out = lm.generate(PROMPT, chat=False, seed=7, logprobs=1, **options)
        last = list(lm.stream(PROMPT, chat=False, seed=7, logprobs=1, **options))[-1]
        assert last.final_ids == out.token_ids[0]
        assert last.stats["tokens"] == len(out.token_ids[0]) == out.stats[0]["tokens"], options
        assert len(last.logprobs) == len(last.final_ids), options
        assert last.logprobs == out.logprobs[0], options
    assert last.final_ids[-1] == stop_id


def test_an_editing_stream_decodes_on_after_an_early_stop(tiny_models):
    """Under token editing the row runs to its end in generate (an edit may still move a stop), so
    a stream whose stop is final in the first block runs on too: the same forwards."""
    lm = tiny_models["llada"]
    options = dict(chat=False, gen_length=16, block_length=8, edit_threshold=0.0, policy="topk_margin", steps=4)
    free = lm.generate(PROMPT, seed=3, **options)
    stop = lm.tokenizer.decode(free.token_ids[0][:2], skip_special_tokens=False)[-1]  # in the first block
    out = lm.generate(PROMPT, seed=3, stop=stop, **options)
    updates = list(lm.stream(PROMPT, seed=3, stop=stop, **options))
    assert out.finish_reasons[0] == updates[-1].finish_reason == "stop"
    assert updates[-1].final_text == out.texts[0] and stop not in out.texts[0]
    assert updates[-1].stats["nfe"] == out.stats[0]["nfe"] == free.stats[0]["nfe"]


def test_spans_in_flight_start_at_the_answer(tmp_path):
    """A block-causal row whose prompt tail (its lead) fills the first model block's start: that
    block's span in answer positions starts at 0, not at minus the lead."""
    model = tiny_block_causal(tmp_path / "v2", "fast_dllm_v2")  # blocks of 4 from position 0
    decoding = Decoding(model, [RowStart(prefix=[9, 10, 11, 12, 30, 31], gen_length=8, seed=0)],
                        GenerationConfig(gen_length=8, block_length=4, stop_at_eos=False))
    assert int(decoding.state.lead[0]) == 2
    assert blocks_in_flight(decoding) == [(0, 2)]  # canvas block [4, 8): the answer's first two
    while blocks_in_flight(decoding) == [(0, 2)]:
        decoding.step()
    assert blocks_in_flight(decoding) == [(2, 6)]
