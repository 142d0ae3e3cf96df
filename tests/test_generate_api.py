"""The generate API's request options: stops, finish reasons, max_tokens, n samples, echo.

Every expectation is derived from a plain run of the same model (cut, regrouped, reseeded),
never hard-coded, so the tests hold for any checkpoint."""
import pytest

import dllm
from dllm.engine.config import block_aligned_gen_length, sample_seeds

PROMPTS = ["Copy: Ann Lee, Bo Kim", "Reverse: Cy Dunn, Di Ely, Ed Fox"]
OPTS = dict(gen_length=32, block_length=8)


@pytest.fixture(scope="module")
def lm():
    return dllm.load()


@pytest.fixture(scope="module")
def plain(lm):
    return lm.generate(PROMPTS, **OPTS)


def _stop_string(text: str) -> str:
    """Two characters from the middle of ``text`` (its first occurrence is where it stops)."""
    assert len(text) >= 4, f"the model's answer {text!r} is too short for this test"
    middle = len(text) // 2
    return text[middle : middle + 2]


def test_plain_rows_end_at_end_of_text_or_length(lm, plain):
    eos = set(lm.model.eos_token_ids)
    for ids, reason in zip(plain.token_ids, plain.finish_reasons):
        assert reason == ("eos" if ids[-1] in eos else "length")
    short = lm.generate(PROMPTS, gen_length=2)
    assert short.finish_reasons == ["eos" if ids[-1] in eos else "length" for ids in short.token_ids]


def test_seconds_are_each_rows_own_latency(lm):
    out = lm.generate(["Copy: Ann Lee", "Reverse: Cy Dunn, Di Ely, Ed Fox, Al Bo, Cy Dee"], gen_length=32,
                      block_length=4)
    (early, late) = sorted(out.stats, key=lambda s: s["nfe"])
    assert early["nfe"] < late["nfe"], "this test needs rows that stop after different forwards"
    assert 0 < early["seconds"] < late["seconds"]


def test_stop_string_cuts_before_its_first_occurrence(lm, plain):
    stops = [_stop_string(t) for t in plain.texts]
    for prompt, text, ids, stop in zip(PROMPTS, plain.texts, plain.token_ids, stops):
        out = lm.generate(prompt, stop=stop, **OPTS)
        assert out.texts == [text[: text.index(stop)]]
        assert out.finish_reasons == ["stop"]
        kept = out.token_ids[0]
        assert kept == ids[: len(kept)]  # same tokens, fewer of them
        assert lm.decode_text(kept).startswith(out.texts[0])
        assert len(lm.decode_text(kept[:-1])) < len(out.texts[0]) or not kept  # the shortest covering ids
        assert out.stats[0]["tokens"] == len(kept)


def test_earliest_of_several_stops_wins(lm, plain):
    text = plain.texts[0]
    early, late = text[1:3], text[-2:]
    out = lm.generate(PROMPTS[0], stop=[late, early], **OPTS)
    assert out.texts == [text[: min(text.index(early), text.index(late))]]
    absent = lm.generate(PROMPTS[0], stop="\x00never", **OPTS)
    assert absent.texts == [text] and absent.finish_reasons == [plain.finish_reasons[0]]


def test_stop_token_id_ends_the_ids_and_is_kept(lm, plain):
    ids = plain.token_ids[1]
    token = ids[len(ids) // 2]
    first = ids.index(token)
    out = lm.generate(PROMPTS[1], stop_token_ids=[token], **OPTS)
    assert out.token_ids == [ids[: first + 1]]
    assert out.texts == [lm.decode_text(ids[:first])]
    assert out.finish_reasons == ["stop"]


def test_stops_per_row_in_a_ragged_batch_equal_single_runs(lm, plain):
    stops = [_stop_string(t) for t in plain.texts]
    batch = lm.generate(PROMPTS, stop=stops, **OPTS)
    singles = [lm.generate(p, stop=stops, **OPTS) for p in PROMPTS]
    assert batch.texts == [s.texts[0] for s in singles]
    assert batch.token_ids == [s.token_ids[0] for s in singles]
    assert batch.finish_reasons == [s.finish_reasons[0] for s in singles]


@pytest.mark.parametrize("block_length", [None, 8])
def test_max_tokens_is_the_block_aligned_canvas_cut_at_max_tokens(lm, block_length):
    eos = set(lm.model.eos_token_ids)
    for max_tokens in (3, 11):
        gen_length = block_aligned_gen_length(max_tokens, block_length)
        full = lm.generate(PROMPTS, gen_length=gen_length, block_length=block_length)
        out = lm.generate(PROMPTS, max_tokens=max_tokens, block_length=block_length)
        for ids, reason, kept, cut_reason in zip(full.token_ids, full.finish_reasons, out.token_ids,
                                                  out.finish_reasons):
            assert kept == ids[:max_tokens]
            text_ids = ids[:-1] if ids[-1] in eos else ids
            assert cut_reason == ("length" if len(text_ids) > max_tokens else reason)  # "length": text was cut
        assert out.texts == [lm.decode_text([t for t in k if t not in eos]) for k in out.token_ids]


def test_max_tokens_follows_a_config_whose_lengths_were_derived(lm):
    single_block = dllm.GenerationConfig(gen_length=64, policy="threshold")
    blocked = dllm.GenerationConfig(gen_length=64, block_length=8, steps=32, policy="threshold")
    assert (lm.generate(PROMPTS, single_block, max_tokens=5).token_ids
            == lm.generate(PROMPTS, gen_length=5, policy="threshold").token_ids)
    assert (lm.generate(PROMPTS, blocked, max_tokens=12).token_ids
            == [ids[:12] for ids in lm.generate(PROMPTS, blocked, gen_length=16, steps=32).token_ids])


def test_a_new_gen_length_carries_a_config_single_block_and_one_token_per_step(lm):
    config = dllm.GenerationConfig(gen_length=64)
    assert lm.generate(PROMPTS, config, gen_length=8).token_ids == lm.generate(PROMPTS, gen_length=8).token_ids


def test_n_samples_are_grouped_by_prompt_and_equal_seeded_single_runs(lm):
    opts = dict(gen_length=16, temperature=1.0, seed=5)
    out = lm.generate(PROMPTS, n=3, **opts)
    expected = [lm.generate(p, seeds=[s], **opts) for p in PROMPTS for s in sample_seeds(5, 3)]
    assert out.token_ids == [e.token_ids[0] for e in expected]
    assert out.texts == [e.texts[0] for e in expected]
    assert len(set(map(tuple, out.token_ids[:3]))) > 1  # distinct seeds give distinct samples here
    seeded = lm.generate(PROMPTS, n=2, seeds=[7, 100], **opts)
    assert seeded.token_ids == [lm.generate(p, seeds=[s], **opts).token_ids[0]
                                for p, base in zip(PROMPTS, [7, 100]) for s in sample_seeds(base, 2)]


def test_echo_puts_the_prompt_text_first(lm, plain):
    out = lm.generate(PROMPTS, echo=True, **OPTS)
    prompts = [lm.decode_text(lm.encode(p)) for p in PROMPTS]
    assert out.texts == [p + t for p, t in zip(prompts, plain.texts)]
    assert out.token_ids == plain.token_ids


def test_prompt_token_ids_are_what_each_row_read(lm):
    """The prompt side of a usage count (vLLM's prompt_token_ids): each row's own prompt ids, the
    chat template included, repeated over its n samples; generate_ids gives back its input."""
    messages = [{"role": "user", "content": "Hi"}]
    out = lm.generate([PROMPTS[1], messages], n=2, gen_length=8)
    read = [lm.encode(PROMPTS[1]), lm.encode(messages)]
    assert out.prompt_token_ids == [read[0], read[0], read[1], read[1]]
    assert len(read[0]) != len(read[1]) and len(read[0]) > len(lm.tokenizer(PROMPTS[1])["input_ids"])  # templated
    assert lm.generate_ids([[5, 6, 7], [8]], gen_length=8).prompt_token_ids == [[5, 6, 7], [8]]


def test_generate_ids_takes_the_same_request_options(lm):
    ids = [lm.encode(p) for p in PROMPTS]
    opts = dict(stop="e", max_tokens=12, n=2, echo=True, temperature=1.0, block_length=4)
    by_text, by_ids = lm.generate(PROMPTS, **opts), lm.generate_ids(ids, **opts)
    assert (by_text.texts, by_text.token_ids, by_text.finish_reasons) == (
        by_ids.texts, by_ids.token_ids, by_ids.finish_reasons)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(n=0), ValueError, "n .samples per prompt. must be a positive int"),
    (dict(n=1.5), TypeError, "n .samples per prompt. must be a positive int"),
    (dict(max_tokens=0), ValueError, "max_tokens must be a positive int"),
    (dict(max_tokens="8"), TypeError, "max_tokens must be a positive int"),
    (dict(max_tokens=8, gen_length=16), ValueError, "pass max_tokens=8 or gen_length=16, not both"),
    (dict(max_tokens=12, block_length=8, steps=3), ValueError, "steps=3 must be a positive multiple"),
    (dict(stop=5), TypeError, "stop must be a string or a list of strings"),
    (dict(stop=["a", ""]), ValueError, "stop strings must be non-empty"),
    (dict(stop_token_ids=[10**6]), ValueError, "outside the model's vocabulary"),
    (dict(stop_token_ids=[1.0]), TypeError, "stop_token_ids must be ints"),
    (dict(echo="yes"), TypeError, "echo must be True or False"),
    (dict(n=2, seeds=[1]), ValueError, "got 1 seeds for 2 prompts"),
])
def test_bad_request_options_are_refused_before_any_model_work(lm, monkeypatch, kwargs, error, match):
    def no_decode(*args, **kw):
        raise AssertionError("the model ran before the request was checked")

    monkeypatch.setattr("dllm.api.model.decode", no_decode)
    with pytest.raises(error, match=match):
        lm.generate(PROMPTS, **kwargs)
    ids = [lm.encode(p) for p in PROMPTS]
    with pytest.raises(error, match=match):
        lm.generate_ids(ids, **kwargs)
