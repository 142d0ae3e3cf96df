"""Certainty forcing (train_small --objective certainty_forcing, dParallel's distillation): the
segment masks of its released code (clean blocks, one block in two complementary copies, every
later token hidden and unscored), its loss against a term-by-term re-computation, and a run that
distils the bundled model on its own answers."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

import dllm
from dllm.api.model import default_model_path
from dllm.engine.decoding import decode
from dllm import GenerationConfig
from dllm.train.certainty_forcing import MASK_RATE, certainty_forcing_loss, certainty_forcing_masks
from dllm.train.train_small import main, teacher_answers
from tests.pb_data import require_data


@pytest.mark.parametrize("block", [None, 4])
def test_masks_cover_one_segment_in_two_complementary_copies(block):
    B, P = 64, 3
    lengths = torch.randint(1, 13, (B,))
    answer = (torch.arange(P + 12)[None, :] >= P) & (torch.arange(P + 12)[None, :] < P + lengths[:, None])
    hidden, scored = certainty_forcing_masks(answer, P, block, torch.Generator().manual_seed(0))
    first, second = scored[:B], scored[B:]
    assert not (first & second).any() and not (hidden & ~answer.repeat(2, 1)).any()
    segment = first | second
    starts = set()
    for r in range(B):
        cols = segment[r].nonzero().flatten().tolist()
        n = int(lengths[r])
        if block is None:
            assert cols == list(range(P, P + n))
        elif cols:  # one block (the remainder at the last index), as randint(0, n // block) draws it
            lo = cols[0] - P
            assert lo % block == 0 and cols == list(range(P + lo, P + min(lo + block, n) if lo // block < n // block else P + n))
            starts.add(lo // block)
        else:  # an empty remainder: n a multiple of block, the last index drawn
            assert n % block == 0
        after = [c for c in range(P, P + n) if c > max(cols, default=P + n)]
        assert all(hidden[r, c] and hidden[B + r, c] and not scored[r, c] for c in after)
        before = [c for c in range(P, P + n) if c < min(cols, default=P + n)]
        assert not any(hidden[r, c] or hidden[B + r, c] for c in before)
    assert block is None or len(starts) > 1
    rate = first.sum() / segment.sum()
    assert abs(float(rate) - MASK_RATE) < 0.08


def test_loss_is_cross_entropy_plus_entropy_of_right_predictions_per_copy():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(4, 6, 11, generator=gen)
    target = torch.randint(0, 11, (4, 6), generator=gen)
    target[0, 0] = logits[0, 0].argmax()  # some predictions are right
    target[3, 2] = logits[3, 2].argmax()
    scored = torch.rand(4, 6, generator=gen) < 0.6
    scored[0, 0] = scored[3, 2] = True
    want = 0.0
    for rows in ([0, 1], [2, 3]):
        ce, ents, n, right = [], 0.0, 0, 0
        for r in rows:
            for c in range(6):
                if scored[r, c]:
                    ce.append(-F.log_softmax(logits[r, c], -1)[target[r, c]])
                    if logits[r, c].argmax() == target[r, c]:
                        p = F.softmax(logits[r, c] / 0.5, -1)
                        ents += float(-(p * torch.log(p + 1e-12)).sum())
                        right += 1
        want += float(torch.stack(ce).mean()) + 2.0 * ents / max(right, 1)
    assert float(certainty_forcing_loss(logits, target, scored, 2.0)) == pytest.approx(want, rel=1e-5)


def test_distils_the_bundled_model_on_its_own_answers(tmp_path):
    """Teacher rows are the starting model's own stepwise answers; two steps write a model that
    still loads and answers."""
    data = require_data()
    base = default_model_path()
    lm = dllm.load(base, device="cpu", dtype="float32")
    prompts = [[5, 17, 42], [7, 8, 9, 10]]
    rows = teacher_answers(lm.model, [(prompts[0], [0] * 8), (prompts[1], [0] * 16)])
    assert rows[0][1] == decode(lm.model, [prompts[0]], GenerationConfig(gen_length=8, steps=8, block_length=8)).answer[0].tolist()
    assert rows[1][1] == decode(lm.model, [prompts[1]], GenerationConfig(gen_length=16, steps=16, block_length=16)).answer[0].tolist()
    out = tmp_path / "cf"
    main(["--out", str(out), "--data", str(data), "--init", str(base), "--objective", "certainty_forcing",
          "--steps", "2", "--batch-size", "4", "--eval-every", "2", "--heldout-per-task", "1",
          "--tasks", "waiting_line/copy", "--threads", "1", "--lr", "1e-4"])
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert log[-1]["eval"]["mean"] == 1.0  # still copies
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "no"), "--objective", "certainty_forcing", "--steps", "2"])
