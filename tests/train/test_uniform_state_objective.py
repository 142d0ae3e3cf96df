"""The uniform-state objective (DiffusionGemma): which canvas is drawn, what the encoder sees, how
the canvas is corrupted, and a run that writes a checkpoint in the original layout."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import dllm
from dllm.api.model import default_model_path
from dllm.models.loading import load_model
from dllm.models.tiny_formats import diffusion_gemma_config
from dllm.train.train_small import build_fresh, main
from dllm.train.uniform_state import (SC_TEMPERATURES, draw_canvases, self_conditioning_temperature,
                                      uniform_corruption, uniform_state_loss)
from tests.pb_data import require_data

C = 4  # canvas length


def _rows():
    """Three left-padded rows, answers from column P = 5: two canvases, one, two."""
    prompts, answers = [3, 5, 2], [2 * C, C, 2 * C]
    W = 5 + 2 * C
    ids = torch.arange(3 * W).reshape(3, W) + 100  # every token distinct
    valid = torch.zeros(3, W, dtype=torch.bool)
    for r, (p, a) in enumerate(zip(prompts, answers)):
        valid[r, 5 - p:5 + a] = True
    return ids, valid, torch.tensor(answers), prompts


def test_each_row_draws_one_of_its_own_canvases_and_the_encoder_sees_only_what_precedes_it():
    ids, valid, answer_len, prompts = _rows()
    drawn_any = set()
    for seed in range(20):
        batch = draw_canvases(ids, valid, answer_len, 5, C, torch.Generator().manual_seed(seed))
        for r in range(3):
            start = int(((ids[r] == batch.canvas[r, 0]).nonzero()))
            k = (start - 5) // C
            drawn_any.add((r, k))
            assert (start - 5) % C == 0 and 0 <= k < answer_len[r] // C, "a whole canvas of the row's answer"
            assert torch.equal(batch.canvas[r], ids[r, start:start + C])
            # positions count from the row's first prompt token, contiguous over the canvas
            assert batch.canvas_positions[r].tolist() == list(range(prompts[r] + k * C, prompts[r] + (k + 1) * C))
            visible = batch.prefix_valid[r].nonzero().flatten().tolist()
            assert visible == list(range(5 - prompts[r], start)), "prompt and earlier canvases, nothing after"
            assert torch.equal(batch.prefix[r, visible], ids[r, visible])
    assert drawn_any == {(0, 0), (0, 1), (1, 0), (2, 0), (2, 1)}, "every canvas gets drawn"


def test_answers_that_are_not_whole_canvases_are_refused():
    ids, valid, _, _ = _rows()
    with pytest.raises(ValueError, match="multiples of the canvas"):
        draw_canvases(ids, valid, torch.tensor([2 * C, C + 1, C]), 5, C, torch.Generator())


def test_corruption_replaces_at_a_per_row_rate_with_uniform_tokens():
    V, B, L = 50, 400, 64
    clean = torch.full((B, L), 7)
    noisy, replaced = uniform_corruption(clean, V, torch.Generator().manual_seed(0))
    assert torch.equal(noisy[~replaced], clean[~replaced]), "kept positions are the clean tokens"
    rates = replaced.float().mean(1)
    assert rates.min() < 0.05 and rates.max() > 0.95, "t ~ U(0, 1) per row spans clean to all noise"
    assert abs(float(rates.mean()) - 0.5) < 0.05
    draws = noisy[replaced]
    assert draws.min() >= 0 and draws.max() < V
    counts = torch.bincount(draws, minlength=V).float()
    expected = len(draws) / V
    assert ((counts - expected).abs() < 6 * expected ** 0.5).all(), "uniform over the whole vocabulary"
    # the replacement may hit the clean token itself, as the reference's uniform draw does
    assert float((draws == 7).float().mean()) == pytest.approx(1 / V, abs=0.01)


def test_self_conditioning_temperatures_span_the_generation_schedule():
    t = self_conditioning_temperature(1000, torch.Generator().manual_seed(0))
    assert t.shape == (1000, 1, 1)
    low, high = SC_TEMPERATURES
    assert low <= float(t.min()) < low + 0.01 and high - 0.01 < float(t.max()) <= high


@pytest.fixture(scope="module")
def tiny_gemma():
    """A fresh random DiffusionGemma of 64 tokens (train_small's own initialisation), no files."""
    raw = diffusion_gemma_config({"eos_token": 1, "pad_token": 0, "bos_token": 2}, d_model=32, n_layers=2, n_heads=2,
                                 n_kv_heads=1, mlp_hidden=32, vocab=64, max_len=64, n_experts=2, top_k=1,
                                 expert_hidden=8, canvas_length=C, image_id=None)
    torch.manual_seed(0)
    return build_fresh(raw, 32)


def test_loss_reads_the_prefix_but_not_the_canvases_after_the_drawn_one(tiny_gemma):
    V = tiny_gemma.config.vocab_size
    ids, valid, answer_len, _ = _rows()
    ids = ids % V
    base = draw_canvases(ids, valid, answer_len, 5, C, torch.Generator().manual_seed(3))

    def loss(batch):
        return uniform_state_loss(tiny_gemma, batch, torch.Generator().manual_seed(1), 1.0)[0]

    reference = loss(base)
    hidden = base.prefix.masked_fill(~base.prefix_valid, 0)  # what the encoder must not read
    unseen = loss(dataclasses.replace(base, prefix=hidden))
    torch.testing.assert_close(unseen, reference, rtol=0, atol=1e-6)
    changed = base.prefix.clone()
    first = base.prefix_valid[0].nonzero()[0, 0]
    changed[0, first] = (changed[0, first] + 1) % V
    seen = loss(dataclasses.replace(base, prefix=changed))
    assert abs(float(seen - reference)) > 1e-4
    # self-conditioning changes the loss pass's input (rate 1 against rate 0, same draws otherwise)
    plain = uniform_state_loss(tiny_gemma, base, torch.Generator().manual_seed(1), 0.0)[0]
    assert abs(float(plain - reference)) > 1e-4


def test_uniform_state_run_writes_the_original_layout_and_continues_from_it(tmp_path):
    data = require_data()
    first, second = tmp_path / "a", tmp_path / "b"
    common = ["--data", str(data), "--family", "diffusion_gemma", "--objective", "uniform_state",
              "--batch-size", "4", "--heldout-per-task", "1", "--tasks", "waiting_line/copy", "--threads", "1"]
    main(["--out", str(first), "--tokenizer", str(default_model_path()), "--bd-size", "32", "--d-model", "32",
          "--n-layers", "2", "--n-heads", "2", "--n-kv-heads", "1", "--mlp-hidden", "32", "--n-experts", "2",
          "--top-k", "1", "--expert-hidden", "8", "--steps", "2", "--eval-every", "2", *common])
    config = json.loads((first / "config.json").read_text())
    assert config["architectures"] == ["DiffusionGemmaForBlockDiffusion"] and config["canvas_length"] == 32
    assert config["image_token_id"] == config["text_config"]["vocab_size"], "no image token: an id no prompt holds"
    from safetensors import safe_open
    with safe_open(str(first / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
    assert "model.decoder.embed_tokens.weight" in names and "lm_head.weight" not in names, "the head is tied"
    assert "model.decoder.layers.0.experts.gate_up_proj" in names
    lm = dllm.load(first)
    assert lm.model.uniform_state and lm.model.lm_head.weight.data_ptr() == lm.model.embed.weight.data_ptr()
    main(["--out", str(second), "--init", str(first), "--steps", "2", "--eval-every", "2", *common])
    again = load_model(second, dtype=torch.float32)
    assert not torch.equal(again.embed.weight, lm.model.embed.weight), "the continued run trained"


def test_uniform_state_pairs_only_with_its_family(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path), "--objective", "uniform_state", "--steps", "1"])
    assert "pair it with --family diffusion_gemma" in capsys.readouterr().err
