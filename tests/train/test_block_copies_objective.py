"""The two-copy block-diffusion objective (train_small --objective block_copies): in one forward,
each noisy block's logits equal those of a block-causal forward over the clean blocks before it and
that noisy block, on the bundled block-causal models (with and without Dream's logit shift)."""
from __future__ import annotations

import pytest
import torch

import dllm
from dllm.bench.metrics import score
from dllm.data.prompts import build_messages, load_samples, load_task_configs
from dllm.models.bundled import resolve_model_path
from dllm.models.loading import load_model
from dllm.models.visibility import KeyVisibility, block_causal_spans
from dllm.train.objectives import block_diffusion_copies
from dllm.train.train_small import main
from tests.pb_data import require_data


def rows(vocab: int, mask_id: int, P: int, A: int, bd: int, gen: torch.Generator):
    """Three rows, answers at column P: a full answer, one a block short, one with a short prompt."""
    B, W = 3, P + A
    ids = torch.randint(3, vocab, (B, W), generator=gen)
    ids[ids == mask_id] = 3
    valid = torch.ones(B, W, dtype=torch.bool)
    answer = torch.zeros(B, W, dtype=torch.bool)
    answer[:, P:] = True
    valid[1, W - bd:] = answer[1, W - bd:] = False  # right-padded: one block shorter
    valid[2, :2] = False  # left-padded prompt
    return ids, valid, answer


@pytest.mark.parametrize("name,bd", [("dllm-waitingline-bd", 8), ("dllm-waitingline-moe", 32)])
def test_every_noisy_block_reads_as_a_forward_of_clean_context_and_itself(name, bd):
    model = load_model(resolve_model_path(name), dtype=torch.float32).eval()
    shift = model.config.shift_logits
    gen = torch.Generator().manual_seed(0)
    P, A, mask_id = 7, 3 * bd, model.config.mask_token_id
    ids, valid, answer = rows(model.config.vocab_size, mask_id, P, A, bd, gen)
    tokens, positions, vis, target, masked, read = block_diffusion_copies(ids, valid, answer, P, bd, mask_id, gen, shift)
    W = P + A
    assert tokens.shape == (3, W + 2 * A) and not masked[:, :W].any()
    first, second = masked[:, W:W + A], masked[:, W + A:]
    assert torch.equal(first ^ second, answer[:, P:]) and not (first & second).any(), "complementary"
    assert torch.equal(target[:, W:W + A], ids[:, P:]) and torch.equal(positions[:, W:W + A], positions[:, P:W])
    with torch.no_grad():
        got = model(tokens, positions, vis)[:, read]
        spans = block_causal_spans(0, W, W, prompt_width=P, block_size=bd)
        for c in range(2):
            for b in range(A // bd):
                lo = P + b * bd
                seq = ids.clone()
                seq[:, lo:lo + bd] = tokens[:, W + c * A + b * bd: W + c * A + (b + 1) * bd]
                ref = model(seq, positions[:, :W], KeyVisibility(valid=valid, spans=spans))
                ref = ref[:, lo - 1:lo + bd - 1] if shift else ref[:, lo:lo + bd]
                cols = slice(W + c * A + b * bd, W + c * A + (b + 1) * bd)
                live = valid[:, lo:lo + bd]
                torch.testing.assert_close(got[:, cols][live], ref[live], atol=1e-4, rtol=1e-4)


def test_block_copies_refuses_a_bidirectional_layout(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "x"), "--family", "llada", "--objective", "block_copies", "--steps", "1"])
    assert "bidirectional" in capsys.readouterr().err


def test_block_copies_run_trains_and_writes_a_checkpoint(tmp_path):
    """Two steps from the bundled block-diffusion model write a block-causal checkpoint that
    still solves official copy samples (the training reads the ParallelBench data)."""
    data = require_data()
    out = tmp_path / "bd"
    init = resolve_model_path("dllm-waitingline-bd")
    main(["--out", str(out), "--family", "fast_dllm_v2", "--objective", "block_copies", "--init",
          str(init), "--steps", "2", "--eval-every", "2", "--data", str(data),
          "--batch-size", "4", "--heldout-per-task", "1", "--threads", "1"])
    trained = load_model(out, dtype=torch.float32)
    assert trained.attention == "block_causal"
    before = load_model(init, dtype=torch.float32).state_dict()
    assert any(not torch.equal(w, before[name]) for name, w in trained.state_dict().items())  # it trained
    lm = dllm.load(out, device="cpu", dtype="float32")
    spec, samples = load_task_configs(data)["waiting_line/copy"], load_samples(data, "waiting_line/copy")[:4]
    texts = lm.generate([build_messages(spec, s) for s in samples], gen_length=32, block_length=8).texts
    assert [score(spec.metric, text, s) for text, s in zip(texts, samples)] == [1.0] * 4
