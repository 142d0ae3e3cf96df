"""``model.stream``: the same tokens as ``generate``, text that only grows and ends as generate's."""
from __future__ import annotations

import pytest

CONFIGS = {
    "low_confidence": dict(),
    "threshold_prefix": dict(policy="threshold", policy_args={"tau": 0.09}, cache="prefix"),
    "sampled_dual": dict(policy="threshold", policy_args={"tau": 0.09}, cache="dual", temperature=0.8),
    "sub_block": dict(policy="factor", policy_args={"factor": 3.75}, cache="dual", sub_block_length=2),
    "freedave": dict(strategy="freedave", strategy_args={"num_drafts": 3}),
    "lopa": dict(strategy="lopa", strategy_args={"branches": 2}),
    "eotp": dict(policy="threshold", policy_args={"tau": 0.09}, stopper="eotp"),
}


def _stream(lm, prompt, **options):
    return list(lm.stream(prompt, chat=False, **options))


@pytest.mark.parametrize("name", CONFIGS)
def test_stream_gives_generates_tokens_and_growing_final_text(tiny_models, name):
    lm = tiny_models["llada"]
    options = dict(gen_length=16, block_length=8, **CONFIGS[name])
    out = lm.generate("hello there", chat=False, seeds=[7], **options)
    updates = _stream(lm, "hello there", seed=7, **options)
    last = updates[-1]
    assert last.finished and all(not u.finished for u in updates[:-1])
    assert last.final_ids == out.token_ids[0]
    assert last.final_text == out.texts[0]
    assert last.stats["nfe"] == out.stats[0]["nfe"]
    assert last.finish_reason == ("eos" if lm.model.eos_token_ids[0] in out.token_ids[0] else "length")
    texts = [u.final_text for u in updates]
    assert all(a == b[: len(a)] for a, b in zip(texts, texts[1:]))  # only grows
    assert all(last.final_text.startswith(t) for t in texts)
    assert "".join(u.text_delta for u in updates) == last.final_text
    committed = {}
    for update in updates[:-1]:
        assert not set(update.committed) & set(committed)  # each position is committed once
        committed.update(update.committed)
        assert all(update.canvas[i] == t for i, t in committed.items())
    assert len(updates) - 1 <= out.stats[0]["nfe"]  # one update per round


def test_stream_stops_at_a_stop_string(tiny_models):
    lm = tiny_models["llada"]
    text = lm.generate("abc", chat=False, gen_length=16).texts[0]
    stop = text[4:6]
    updates = _stream(lm, "abc", gen_length=16, stop=stop)
    assert updates[-1].finish_reason == "stop"
    assert updates[-1].final_text == text[: text.find(stop)]
    assert all(stop not in u.final_text for u in updates)


def test_stream_refuses_bad_input_before_decoding(tiny_models):
    lm = tiny_models["llada"]
    with pytest.raises(ValueError, match="one prompt"):
        lm.stream(["a", "b"], chat=False)
    with pytest.raises(ValueError, match="block_length"):
        lm.stream("a", chat=False, gen_length=10, block_length=4)
    with pytest.raises(ValueError, match="stop strings"):
        lm.stream("a", chat=False, stop=[""])


@pytest.mark.parametrize("max_tokens", [3, 6])
def test_stream_takes_max_tokens_as_generate_does(tiny_models, max_tokens):
    lm = tiny_models["llada"]
    options = dict(block_length=4, max_tokens=max_tokens)
    out = lm.generate("hello there", chat=False, **options)
    updates = _stream(lm, "hello there", **options)
    last = updates[-1]
    assert (last.final_text, last.final_ids, last.finish_reason) == (out.texts[0], out.token_ids[0],
                                                                      out.finish_reasons[0])
    assert len(last.canvas) == 4 * -(-max_tokens // 4)  # whole blocks that hold max_tokens
    assert all(len(u.final_text) <= len(last.final_text) for u in updates)  # nothing past the cut shown
    with pytest.raises(ValueError, match="not both"):
        lm.stream("a", chat=False, max_tokens=4, gen_length=8)


EDITING = {
    "stop": dict(edit_threshold=0.0, gen_length=16, block_length=8, steps=4, policy="topk_margin", stop=["a"]),
    "max_tokens": dict(edit_threshold=0.0, max_tokens=8, block_length=12, steps=1, policy="factor",
                       temperature=0.8, top_p=0.9, cfg_scale=1.0),
}


@pytest.mark.parametrize("name", EDITING)
def test_stream_under_token_editing_ends_as_generate(name):
    """Token editing may rewrite a committed token until its window ends, so a stream emits only
    what lies before the active window and decodes on as ``generate`` does: the same text,
    reason and forwards (it used to end at a stop or max_tokens an edit later removed)."""
    import dllm

    lm = dllm.load("dllm-waitingline-llada", device="cpu", dtype="float32")
    prompt = "Sort these names: Bob Smith, Alice Jones."
    for seed in (10, 11):  # seeds whose streams differed from generate before the fix
        out = lm.generate(prompt, seed=seed, **EDITING[name])
        updates = list(lm.stream(prompt, seed=seed, **EDITING[name]))
        last = updates[-1]
        assert (last.final_text, last.finish_reason) == (out.texts[0], out.finish_reasons[0]), seed
        assert last.stats["nfe"] == out.stats[0]["nfe"], seed
        assert "".join(u.text_delta for u in updates) == last.final_text
