"""The pipelined mode (D2F): its own loop reproduced token for token on tiny LLaDA / Dream D2F
students and the bundled block-diffusion model, under every cache; one block at a time when the
thresholds say so; ragged batches equal single rows; stoppers; bad combinations refused."""
from __future__ import annotations

import io
import json
import shutil

import pytest
import torch

import dllm
from dllm.cli.chat import _LiveLine
from dllm.engine.config import GenerationConfig
from dllm.engine.decoding import decode
from dllm.models.bundled import resolve_model_path
from dllm.models.tiny import write_tiny_checkpoint
from tests.oracles_d2f import d2f_generate

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 16, 17, 18, 19], [20, 21, 22]]  # 7, 8 (one block), 3


def d2f_student(path, family: str, block_size: int = 4):
    """A tiny ``family`` checkpoint marked as a D2F student: block-causal, the prompt one block."""
    write_tiny_checkpoint(path, family, seed=11)
    config = json.loads((path / "config.json").read_text())
    config.update(dllm_attention="block_causal", dllm_block_size=block_size)
    (path / "config.json").write_text(json.dumps(config))
    return dllm.load(path, device="cpu", dtype="float32").model


def bd_with_d2f_mask(path):
    """The trained block-diffusion model read with D2F's mask (the prompt one block): confident
    predictions for the pipelined mode's tests."""
    shutil.copytree(resolve_model_path("dllm-waitingline-bd"), path)
    config = json.loads((path / "config.json").read_text())
    config["dllm_block_origin"] = "prompt"
    (path / "config.json").write_text(json.dumps(config))
    return dllm.load(path, device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def students(tmp_path_factory):
    root = tmp_path_factory.mktemp("d2f")
    out = {f: d2f_student(root / f, f) for f in ("llada", "dream")}
    out["bd"] = bd_with_d2f_mask(root / "bd")
    return out


def cut(ids, eos):
    ids = list(ids)
    return ids[: ids.index(eos) + 1] if eos in ids else ids


def engine(model, prompts, *, block, skip, add, decoded, cache="none", gen_length=16, **extra):
    config = GenerationConfig(gen_length=gen_length, block_length=block, policy="low_confidence",
                              policy_args={"tau": skip}, block_add_threshold=add, decoded_token_threshold=decoded,
                              cache=cache, **extra)
    return decode(model, prompts, config)


# skip thresholds around the random models' confidences, so semi-active blocks commit some
# tokens and up to four blocks are in flight: (skip of LLaDA, of Dream, block_add, decoded_token)
SETTINGS = [(0.08, 0.06, 0.25, 0.5), (0.1, 0.075, 0.5, 0.75), (0.12, 0.06, 0.0, 1.0), (0.1, 0.075, 0.1, 0.95),
            (0.9, 0.9, 0.25, 0.5)]


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("setting", SETTINGS)
def test_tiny_students_match_d2f_loop(students, family, setting):
    skip, add, decoded = setting[0 if family == "llada" else 1], setting[2], setting[3]
    model = students[family]
    eos = model.eos_token_ids[0]
    for prompt in PROMPTS:
        want = d2f_generate(model, prompt, gen_length=16, block_size=4, block_add_threshold=add,
                            decoded_token_threshold=decoded, skip_threshold=skip, eos_id=eos)
        for cache in ("none", "dual"):
            got = engine(model, [prompt], block=4, skip=skip, add=add, decoded=decoded, cache=cache)
            assert cut(got.answer[0].tolist(), eos) == cut(want, eos), (prompt, cache)


@pytest.mark.parametrize("skip,add,decoded", [(0.9, 0.1, 0.95), (0.9, 0.5, 0.5), (0.7, 0.25, 0.75)])
def test_trained_model_matches_d2f_loop(students, skip, add, decoded):
    lm = students["bd"]
    model, eos = lm.model, lm.model.eos_token_ids[0]
    prompts = [lm.encode(t) for t in ("Sort these names: Bob Smith, Alice Jones, Carol White.",
                                      "Reverse the list: Dan Brown, Eve Black.")]
    for prompt in prompts:
        want = d2f_generate(model, prompt, gen_length=32, block_size=8, block_add_threshold=add,
                            decoded_token_threshold=decoded, skip_threshold=skip, eos_id=eos)
        for cache in ("none", "prefix", "dual"):
            got = engine(model, [prompt], block=8, skip=skip, add=add, decoded=decoded, cache=cache, gen_length=32)
            assert cut(got.answer[0].tolist(), eos) == cut(want, eos), cache
    # several blocks really were in flight: strictly fewer forwards than one block at a time
    # (measured 6 / 5 / 4 against 10 / 10 / 6 for the three settings)
    one_at_a_time = engine(model, prompts[:1], block=8, skip=skip, add=1.0, decoded=1.0, gen_length=32)
    pipelined = engine(model, prompts[:1], block=8, skip=skip, add=add, decoded=decoded, gen_length=32)
    assert int(pipelined.nfe[0]) < int(one_at_a_time.nfe[0])


def test_one_block_at_a_time_is_the_block_decode():
    """add = decoded = 1: a block joins when the last is full and is then fully active, which is
    the ordinary block-by-block decode with the same rule (tokens, forwards, token-forwards)."""
    model = dllm.load("dllm-waitingline-bd", device="cpu", dtype="float32")
    prompts = [model.encode("Sort these names: Bob Smith, Alice Jones."), model.encode("Reverse: Eve Black, Dan Brown.")]
    for policy, args in [("threshold", {"tau": 0.9}), ("entropy_threshold", {"tau": 0.3}),
                         ("low_confidence", {"tau": 0.8})]:
        for cache in ("none", "dual"):
            opts = dict(gen_length=32, block_length=8, policy=policy, policy_args=args, cache=cache)
            plain = decode(model.model, prompts, GenerationConfig(**opts))
            piped = decode(model.model, prompts, GenerationConfig(**opts, block_add_threshold=1.0,
                                                                  decoded_token_threshold=1.0))
            assert torch.equal(plain.answer, piped.answer), (policy, cache)
            assert torch.equal(plain.nfe, piped.nfe)


@pytest.mark.parametrize("family", ["llada", "dream", "bd"])
def test_ragged_batch_equals_single_rows(students, family):
    lm = students[family]
    model = getattr(lm, "model", lm)
    block = 8 if family == "bd" else 4
    skip = {"bd": 0.9, "llada": 0.1, "dream": 0.06}[family]
    for cache in ("none", "dual"):
        opts = dict(block=block, skip=skip, add=0.25, decoded=0.5, cache=cache, gen_length=4 * block)
        batch = engine(model, PROMPTS, **opts)
        for i, prompt in enumerate(PROMPTS):
            alone = engine(model, [prompt], **opts)
            assert torch.equal(batch.answer[i], alone.answer[0]), (cache, i)
            assert int(batch.nfe[i]) == int(alone.nfe[0])


def test_stoppers_and_sampling_compose(students):
    model = students["bd"].model
    prompts = [students["bd"].encode("Sort these names: Bob Smith, Alice Jones."), [5, 6, 7]]
    for extra in [dict(stopper="eotp"), dict(stopper="sched"), dict(temperature=0.7, seed=3)]:
        opts = dict(block=8, skip=0.9, add=0.25, decoded=0.5, cache="dual", gen_length=32, **extra)
        batch = engine(model, prompts, **opts)
        for i, prompt in enumerate(prompts):
            assert torch.equal(batch.answer[i], engine(model, [prompt], **opts).answer[0]), extra
        assert not bool((batch.answer == model.mask_token_id).any())


def test_refused_combinations(students):
    bidirectional = dllm.load("dllm-waitingline-llada", device="cpu").model
    with pytest.raises(ValueError, match="needs a block-causal model"):
        engine(bidirectional, [[5, 6]], block=8, skip=0.9, add=0.5, decoded=0.9)
    model = students["bd"].model
    with pytest.raises(ValueError, match="needs a rule with a threshold"):
        decode(model, [[5, 6]], GenerationConfig(gen_length=16, block_length=8, block_add_threshold=0.5))
    with pytest.raises(ValueError, match="does not run with strategy 'freedave'"):
        GenerationConfig(gen_length=16, block_length=8, block_add_threshold=0.5, strategy="freedave")
    with pytest.raises(ValueError, match="does not run with sub_block_length"):
        GenerationConfig(gen_length=16, block_length=8, sub_block_length=4, block_add_threshold=0.5)
    with pytest.raises(ValueError, match=r"block_add_threshold must be a decoded share in \[0, 1\]"):
        GenerationConfig(gen_length=16, block_length=8, block_add_threshold=1.5)
    with pytest.raises(ValueError, match=r"decoded_token_threshold must be a decoded share in \[0, 1\]"):
        GenerationConfig(gen_length=16, block_length=8, block_add_threshold=0.5, decoded_token_threshold=-0.1)
    with pytest.raises(ValueError, match=r"does not run with token editing \(edit_threshold\)"):
        GenerationConfig(gen_length=16, block_length=8, block_add_threshold=0.5, edit_threshold=0.5)


def test_stream_and_live_line_show_blocks_in_flight(students):
    lm = students["bd"]
    options = dict(gen_length=32, block_length=8, policy="low_confidence", policy_args={"tau": 0.9},
                   block_add_threshold=0.1, decoded_token_threshold=0.95)
    prompt = "Sort these names: Bob Smith, Alice Jones, Carol White."
    updates = list(lm.stream(prompt, chat=False, **options))
    assert all(u.pipelined for u in updates[:-1]) and updates[-1].in_flight == []
    assert max(len(u.in_flight) for u in updates) >= 2  # several blocks in flight at once
    assert updates[-1].final_text == lm.generate(prompt, chat=False, **options).texts[0]
    out = io.StringIO()
    line = _LiveLine(out, lambda t: chr(ord("a") + t % 26), mask_id=1, eos_ids={0})
    line.draw("x", [5, 1, 6, 1, 1, 7, 1, 1, 1, 1], 1, in_flight=[(0, 3), (3, 6)])
    assert out.getvalue().endswith("x_g|__h")  # the line ends with the last block in flight


def test_cli_options(tmp_path):
    from dllm.cli.main import build_parser
    from dllm.cli.options import generation_config

    args = build_parser().parse_args(["generate", "--block-add-threshold", "0.1", "--decoded-token-threshold", "0.9",
                                      "--policy", "threshold", "--block-length", "8", "--gen-length", "32", "hi"])
    config = generation_config(args)
    assert (config.block_add_threshold, config.decoded_token_threshold) == (0.1, 0.9)
    args = build_parser().parse_args(["generate", "--block-add-threshold", "0.1", "hi"])
    with pytest.raises(ValueError, match="needs a rule with a threshold"):
        generation_config(args)


def test_lopa_runs_pipelined(students):
    """LoPA's branches span every block in flight: with no branch it is the anchor alone, i.e.
    the plain pipeline's tokens; with 1-3 branches a ragged batch gives single rows' tokens (not
    always their NFE: a window that moves for another row costs LoPA a fresh forward)."""
    lm = students["bd"]
    prompts = [lm.encode("Sort these names: Bob Smith, Alice Jones, Carol White."), lm.encode("Reverse: Eve Black.")]
    base = dict(block=8, skip=0.9, add=0.1, decoded=0.95, cache="dual", gen_length=32)
    plain = engine(lm.model, prompts, **base)
    anchor = engine(lm.model, prompts, **base, strategy="lopa", strategy_args={"branches": 0})
    assert torch.equal(plain.answer, anchor.answer)
    for branches in (1, 3):
        opts = dict(base, strategy="lopa", strategy_args={"branches": branches, "confidence": "neg_entropy"})
        batch = engine(lm.model, prompts, **opts)
        assert not bool((batch.answer == lm.model.mask_token_id).any())
        for i, prompt in enumerate(prompts):
            alone = engine(lm.model, [prompt], **opts)
            assert torch.equal(batch.answer[i], alone.answer[0])


def test_prompt_tail_filling_blocks_below_the_model_block(tmp_path):
    """block_length below the model's block, blocks counted from position 0 (Fast-dLLM v2): a
    prompt ending in the second half of a model block leads its answer region with whole blocks
    of decided prompt tail, which the pipeline adds at once, so a row always has a block in
    flight. With add = decoded = 1 that is the block-by-block decode; a ragged batch equals its rows."""
    write_tiny_checkpoint(tmp_path, "fast_dllm_v2", seed=1)
    model = dllm.load(tmp_path, device="cpu", dtype="float32").model
    assert model.config.block_size == 8 and model.config.block_origin == "absolute"
    prompts = [list(range(5, 19)), list(range(5, 10)), list(range(5, 14))]  # tails of 6, 5 (under one unit), 1
    opts = dict(gen_length=8, block_length=4, policy="threshold", policy_args={"tau": 0.9})
    plain = decode(model, prompts, GenerationConfig(**opts))
    piped = decode(model, prompts, GenerationConfig(**opts, block_add_threshold=1.0, decoded_token_threshold=1.0))
    assert torch.equal(plain.answer, piped.answer)
    loose = GenerationConfig(**opts, block_add_threshold=0.5, decoded_token_threshold=0.5)
    batch = decode(model, prompts, loose)
    for i, prompt in enumerate(prompts):
        alone = decode(model, [prompt], loose)
        assert torch.equal(batch.answer[i], alone.answer[0]), i
        assert int(batch.nfe[i]) == int(alone.nfe[0])


def test_without_stop_at_eos_blocks_are_added_after_an_end_of_text(tmp_path):
    """D2F adds no block after an end-of-text only when the text ends there (stop_at_eos): with
    it off the pipeline decodes on past the end-of-text, one block at a time (add = decoded = 1)
    as the block decode does, tokens and forwards."""
    from tests.test_lead_never_decoded import tiny_with_eos

    model = tiny_with_eos(tmp_path, 123)  # a token this random model often predicts
    prompts = [[9, 10, 11, 12, 30], [20, 21], [9, 10, 11, 12]]
    opts = dict(gen_length=12, block_length=4, policy="threshold", policy_args={"tau": 0.3}, stop_at_eos=False)
    plain = decode(model, prompts, GenerationConfig(**opts))
    assert any(123 in row[:-4] for row in plain.answer.tolist())  # an end-of-text before the last block
    one_at_a_time = decode(model, prompts, GenerationConfig(**opts, block_add_threshold=1.0,
                                                            decoded_token_threshold=1.0))
    assert torch.equal(one_at_a_time.answer, plain.answer) and torch.equal(one_at_a_time.nfe, plain.nfe)
