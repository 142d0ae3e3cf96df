"""A block-causal row's prompt tail, placed at the start of its answer region (blocks counted
from position 0), is prompt: never decoded, even where a prompt token equals the mask id."""
from __future__ import annotations

import json

import pytest
import torch

import dllm
from dllm import GenerationConfig
from dllm.engine.decoding import Decoding, RowStart, decode
from dllm.models.tiny import write_tiny_checkpoint
from tests.block_causal_tiny import tiny_block_causal


@pytest.mark.parametrize("kind", ["fast_dllm_v2", "sdar"])
def test_a_mask_id_in_the_prompt_tail_stays(tmp_path, kind):
    model = tiny_block_causal(tmp_path / kind, kind)  # blocks of 4 from position 0
    mask = model.mask_token_id
    prompts = [[9, 10, 11, 12, 30, mask], [mask, 21]]  # tails of 2 (one of them all lead)
    decoding = Decoding(model, [RowStart(prefix=p, gen_length=8, seed=i) for i, p in enumerate(prompts)],
                        GenerationConfig(gen_length=8, block_length=4, stop_at_eos=False))
    leads = decoding.state.lead.tolist()
    assert leads == [2, 2]
    decoding.run()
    region = decoding.state.tokens[:, decoding.state.canvas.prompt_width :].tolist()
    for row, prompt in enumerate(prompts):
        assert region[row][: leads[row]] == prompt[-leads[row]:]
    assert mask not in sum(decoding.answer().tolist(), [])


def ragged_prompts(mask: int) -> list[list[int]]:
    """Leads of 2 (ending in the mask id), 2 (all lead, from the mask id), 0 and 3."""
    return [[9, 10, 11, 12, 30, mask], [mask, 21], [9, 10, 11, 12], [9, 10, 11, 12, 13, 14, 15]]


def tiny_with_eos(directory, eos: int):
    """tiny_block_causal's Fast-dLLM v2 (the same weights: seed 3, blocks of 4) with ``eos`` as
    its end-of-text, so a random model ends its texts."""
    path = write_tiny_checkpoint(directory / f"eos{eos}", "fast_dllm_v2", seed=3, block_size=4)
    config = json.loads((path / "config.json").read_text())
    config["eos_token_id"] = eos
    (path / "config.json").write_text(json.dumps(config))
    return dllm.load(path).model


@pytest.mark.parametrize("kind", ["fast_dllm_v2", "sdar"])
def test_the_pipelined_mode_moves_past_a_mask_id_in_the_prompt_tail(tmp_path, kind):
    """The pipelined mode counts a prompt tail's mask id as prompt, not as a mask its block still
    has: with add = decoded = 1 it is the block decode (tokens, forwards), and a real pipeline
    gives each ragged row (mask-id lead, none, another lead) its single run's tokens and NFE."""
    model = tiny_block_causal(tmp_path / kind, kind)
    prompts = ragged_prompts(model.mask_token_id)
    for cache in ("none", "dual"):
        opts = dict(gen_length=8, block_length=4, policy="threshold", policy_args={"tau": 0.3}, cache=cache)
        plain = decode(model, prompts, GenerationConfig(**opts))
        one_at_a_time = decode(model, prompts, GenerationConfig(**opts, block_add_threshold=1.0,
                                                                decoded_token_threshold=1.0))
        assert torch.equal(one_at_a_time.answer, plain.answer), cache
        assert torch.equal(one_at_a_time.nfe, plain.nfe), cache
        piped = GenerationConfig(**dict(opts, policy_args={"tau": 0.1}), block_add_threshold=0.5,
                                 decoded_token_threshold=0.75)
        batch = decode(model, prompts, piped)
        assert model.mask_token_id not in batch.answer.flatten().tolist()
        for i, prompt in enumerate(prompts):
            alone = decode(model, [prompt], piped)
            assert torch.equal(batch.answer[i], alone.answer[0]), (cache, i)
            assert int(batch.nfe[i]) == int(alone.nfe[0]), (cache, i)


def test_a_mask_id_in_the_prompt_tail_does_not_keep_the_text_open(tmp_path):
    """A row whose text holds an end-of-text with no answer mask before it is final, whatever its
    prompt tail holds: it commits nothing after that round (its other masks become end-of-text),
    in the block decode and in the pipelined mode, and until then it is a run that never stops."""
    model = tiny_with_eos(tmp_path, 123)  # a token this random model often predicts
    prompts = ragged_prompts(model.mask_token_id)
    opts = dict(gen_length=8, block_length=4, policy="threshold", policy_args={"tau": 0.3})
    never = decode(model, prompts, GenerationConfig(**opts, stop_at_eos=False)).answer.tolist()
    assert 123 in never[0]  # the row with a mask-id lead does write the end-of-text
    for extra in (dict(), dict(block_add_threshold=1.0, decoded_token_threshold=1.0)):
        got = decode(model, prompts, GenerationConfig(**opts, **extra))
        for row, order, full in zip(got.answer.tolist(), got.order.tolist(), never):
            end = full.index(123) + 1 if 123 in full else len(full)
            assert row[:end] == full[:end], extra
            final = max(order[:end])  # the round whose commits made the text final
            for j in range(end, len(full)):
                assert order[j] <= final, (extra, row, order)
                assert row[j] == (full[j] if order[j] >= 0 else 123), (extra, row, order)


def test_eotp_never_ends_a_text_inside_the_prompt_tail(tmp_path):
    """EoTP ends a row after its most confident masked position that predicts end-of-text; a
    prompt tail's mask id is no masked position, so the row is never cut inside its prompt tail
    (which would overwrite the prompt with end-of-text)."""
    model = tiny_with_eos(tmp_path, 294)  # this model predicts 294 at the tail's mask ids
    mask = model.mask_token_id
    prompts = [[9, 10, 11, 12, mask, mask, mask], [mask, 21]]
    for extra in (dict(), dict(block_add_threshold=0.5, decoded_token_threshold=0.75)):
        decoding = Decoding(model, [RowStart(prefix=p, gen_length=8) for p in prompts],
                            GenerationConfig(gen_length=8, block_length=4, policy="threshold",
                                             policy_args={"tau": 0.3}, stopper="eotp", **extra))
        decoding.run()
        state = decoding.state
        P, leads = state.canvas.prompt_width, state.lead.tolist()
        assert leads == [3, 2]
        for row, prompt in enumerate(prompts):
            assert state.tokens[row, P : P + leads[row]].tolist() == prompt[-leads[row]:], extra
            assert int(state.end[row]) - P > leads[row], extra


@pytest.mark.parametrize("kind", ["fast_dllm_v2", "sdar"])
def test_drafts_see_no_work_in_the_prompt_tail(tmp_path, kind):
    """FreeDave with one draft is the base decode, forward for forward: its draft is the base
    step, verified only while it leaves work. A prompt tail's mask id is no work, so rows with
    one are not charged a verify forward for a block already decoded."""
    model = tiny_block_causal(tmp_path / kind, kind)
    prompts = ragged_prompts(model.mask_token_id)
    opts = dict(gen_length=8, block_length=4, policy="threshold", policy_args={"tau": 0.3})
    base = decode(model, prompts, GenerationConfig(**opts))
    one_draft = decode(model, prompts, GenerationConfig(**opts, strategy="freedave",
                                                        strategy_args={"num_drafts": 1}))
    assert torch.equal(one_draft.answer, base.answer)
    assert one_draft.nfe.tolist() == base.nfe.tolist()


@pytest.mark.parametrize("kind", ["fast_dllm_v2", "sdar"])
def test_the_stoppers_answer_span_leaves_the_lead_out(tmp_path, kind):
    """SchED / Prophet average their margin, and EoTP looks for end-of-text, over the answer
    only: a row's lead (its prompt tail) is outside ``answer_region``, so a block-causal row's
    exit does not weigh the model's predictions at prompt positions."""
    from dllm.samplers.stoppers.span import answer_region

    model = tiny_block_causal(tmp_path / kind, kind)
    prompts = ragged_prompts(model.mask_token_id)
    decoding = Decoding(model, [RowStart(prefix=p, gen_length=8, seed=i) for i, p in enumerate(prompts)],
                        GenerationConfig(gen_length=8, block_length=4, stopper="sched"))
    state = decoding.state
    G, P = state.config.gen_length, state.canvas.prompt_width
    ends = [12, 12, 8, 12]  # lead + 8 answer positions, in whole blocks of 4 (row 2: no lead)
    assert state.lead.tolist() == [2, 2, 0, 3] and (state.end - P).tolist() == ends and G == 12
    expected = [[lead <= j < end for j in range(G)] for lead, end in zip((2, 2, 0, 3), ends)]
    assert answer_region(state).tolist() == expected
    state.end = state.end.clone()
    state.end[1] -= 3  # an EoTP cut keeps its meaning: the answer ends there
    expected[1] = [2 <= j < G - 3 for j in range(G)]
    assert answer_region(state).tolist() == expected


def test_the_window_start_counts_a_rows_answer_after_its_lead(tmp_path):
    """``Decoding.window_start`` is the active window's first position as ``answer()`` numbers a
    row (after its lead): window w of 4 starts at max(4 w - lead, 0). Under token editing what
    lies before it is final: the end of the decode keeps it (the stream and the server send it)."""
    model = tiny_block_causal(tmp_path / "fast_dllm_v2", "fast_dllm_v2")
    prompts = ragged_prompts(model.mask_token_id)
    config = GenerationConfig(gen_length=12, block_length=4, stop_at_eos=False, edit_threshold=0.0)
    decoding = Decoding(model, [RowStart(prefix=p, gen_length=12, seed=i) for i, p in enumerate(prompts)], config)
    leads = decoding.state.lead.tolist()
    assert leads == [2, 2, 0, 3]
    seen, finals = set(), []
    while not decoding.done:
        answer = decoding.answer().tolist()
        for row, lead in enumerate(leads):
            start = decoding.window_start(row)
            assert start == max(4 * decoding.window - lead, 0), (decoding.window, row)
            finals.append((row, answer[row][:start]))
        seen.add(decoding.window)
        decoding.step()
    assert seen == {0, 1, 2, 3}  # windows that start before, at and after each lead's end
    answer = decoding.answer().tolist()
    assert int(decoding.state.edits.sum()) > 0  # editing rewrote committed tokens
    for row, prefix in finals:
        assert answer[row][: len(prefix)] == prefix


def test_an_end_of_text_in_the_prompt_tail_does_not_end_the_pipeline(tmp_path):
    """The pipelined mode adds no block after an end-of-text (stop_at_eos), but an end-of-text in
    a row's prompt tail is prompt: the row's blocks keep being added, so one block at a time
    (add = decoded = 1) is the block decode, tokens and forwards, and a real pipeline fills
    every row's answer."""
    model = tiny_with_eos(tmp_path, 123)
    prompts = [[9, 10, 11, 12, 30, 123], [123, 21], [9, 10, 11, 12, 13, 123, 15]]  # tails of 2, 2, 3
    opts = dict(gen_length=8, block_length=4, policy="threshold", policy_args={"tau": 0.3})
    plain = decode(model, prompts, GenerationConfig(**opts))
    one_at_a_time = decode(model, prompts, GenerationConfig(**opts, block_add_threshold=1.0,
                                                            decoded_token_threshold=1.0))
    assert torch.equal(one_at_a_time.answer, plain.answer) and torch.equal(one_at_a_time.nfe, plain.nfe)
    piped = decode(model, prompts, GenerationConfig(**opts, block_add_threshold=0.5, decoded_token_threshold=0.75))
    assert model.mask_token_id not in piped.answer.flatten().tolist()
