"""The D2F objective (train_small --objective d2f): per-block mask rates that never decrease along
the answer, a prompt never masked, block-causal visibility with the prompt as one block, and a
run that writes a student the pipelined mode decodes."""
from __future__ import annotations

import json
import random

import pytest
import torch

import dllm
from dllm.api.model import default_model_path
from dllm.bench.metrics import score
from dllm.data.prompts import build_messages, default_data_dir, load_samples, load_task_configs
from dllm.models.tokenizer import load_tokenizer
from dllm.train.canvas_mix import CanvasMix
from dllm.train.corpus import TaskCorpus
from dllm.train.objectives import D2F_LAST, d2f_block_rates, d2f_masks
from dllm.train.train_small import main, make_d2f_batch
from tests.pb_data import require_data


def test_block_rates_start_in_range_and_never_decrease_up_to_the_cap():
    gen = torch.Generator().manual_seed(0)
    n_blocks = torch.tensor([1, 2, 4, 16] * 64)
    rates = d2f_block_rates(n_blocks, gen)
    assert rates.shape == (256, 16)
    assert ((rates[:, 0] >= 0.2) & (rates[:, 0] < 0.7)).all()
    for row, n in zip(rates, n_blocks.tolist()):
        own = row[:n]
        assert (own[1:] >= own[:-1]).all(), "later blocks are at least as noisy"
        assert own[-1] <= D2F_LAST + 1e-6


def test_masks_leave_the_prompt_alone_and_rise_block_by_block():
    gen = torch.Generator().manual_seed(1)
    B, P, bd = 4000, 6, 4
    answer = torch.zeros(B, P + 16, dtype=torch.bool)
    answer[:, P:] = True
    answer[: B // 2, P + 8:] = False  # shorter answers, right-padded
    masked, rate = d2f_masks(answer, P, bd, gen)
    assert not masked[:, :P].any() and not (masked & ~answer).any()
    assert (rate[~answer] == 0).all() and (rate[masked] > 0).all()
    blocks = rate[:, P:].reshape(B, 4, bd)
    assert (blocks == blocks[..., :1]).all(), "one rate per block"
    long_rows = blocks[B // 2:, :, 0]
    assert (long_rows[:, 1:] >= long_rows[:, :-1]).all()
    share = masked[B // 2:, P:].reshape(-1, 4, bd).float().mean((0, 2))
    assert (share[1:] > share[:-1]).all(), f"later blocks masked more often: {share.tolist()}"


def visible(attn, width: int) -> torch.Tensor:
    """(queries, keys) bool: which keys each query sees under the batch's spans."""
    out = torch.zeros(width, width, dtype=torch.bool)
    for lo, hi, key_end in attn.segments(width, width):
        out[lo:hi, :key_end] = True
    return out


@pytest.mark.parametrize("mix", [None, CanvasMix(long_share=1.0, min_gen_length=40, max_gen_length=60)])
def test_batch_is_block_causal_with_the_prompt_as_one_block(mix):
    tokenizer = load_tokenizer(default_model_path())
    require_data()
    corpus = TaskCorpus(default_data_dir(), seed=0, tasks=("waiting_line/copy", "waiting_line/sort"))
    bd = 8
    noisy, positions, attn, ids, masked, rate = make_d2f_batch(
        tokenizer, corpus, 6, torch.Generator().manual_seed(0), tokenizer.mask_token_id, bd, mix, random.Random(0))
    answer = rate > 0
    P = int(answer.long().argmax(-1).min())
    width = ids.shape[1]
    assert ((width - P) % bd) == 0, "answers fill whole blocks"
    assert torch.equal(noisy[~masked], ids[~masked]) and (noisy[masked] == tokenizer.mask_token_id).all()
    assert not masked[:, :P].any(), "the prompt is never masked"
    q, k = torch.arange(width)[:, None], torch.arange(width)[None, :]
    block = lambda i: (i - P) // bd  # noqa: E731 - answer blocks from the answer start
    expected = (k < P) | ((q >= P) & (k >= P) & (block(k) <= block(q)))
    assert torch.equal(visible(attn, width), expected)


def test_d2f_run_writes_a_student_the_pipeline_decodes(tmp_path):
    """Two steps from the bundled model in its own layout (LLaDA: the Dream layout's logit shift
    starts it over, loss ~12) keep its skill: the pipelined decode solves official copy samples."""
    data = require_data()
    base = default_model_path()
    out = tmp_path / "d2f"
    main(["--out", str(out), "--data", str(data), "--objective", "d2f", "--family", "llada", "--bd-size", "8",
          "--tokenizer", str(base), "--init-weights", str(base), "--long-canvas", "0.5", "--one-shot", "0.5",
          "--steps", "2", "--batch-size", "4", "--eval-every", "2", "--heldout-per-task", "1",
          "--tasks", "waiting_line/copy", "--threads", "1"])
    config = json.loads((out / "config.json").read_text())
    assert (config["dllm_attention"], config["dllm_block_size"], config["dllm_block_origin"]) == ("block_causal", 8, "prompt")
    lm = dllm.load(out)
    assert lm.model.attention == "block_causal" and lm.model.config.block_origin == "prompt"
    spec, samples = load_task_configs(data)["waiting_line/copy"], load_samples(data, "waiting_line/copy")[:4]
    result = lm.generate([build_messages(spec, s) for s in samples], gen_length=32, block_length=8,
                         policy="low_confidence", policy_args={"tau": 0.9}, block_add_threshold=0.1,
                         decoded_token_threshold=0.95)
    assert result.stats[0]["nfe"] < 32  # several tokens per forward: the pipelined mode ran
    assert [score(spec.metric, text, s) for text, s in zip(result.texts, samples)] == [1.0] * 4


def test_d2f_keeps_a_block_causal_familys_block_size_and_refuses_a_non_student_init(tmp_path, capsys):
    data = require_data()
    base = default_model_path()
    common = ["--data", str(data), "--objective", "d2f", "--steps", "1", "--batch-size", "2", "--eval-every", "1",
              "--heldout-per-task", "1", "--tasks", "waiting_line/copy", "--threads", "1"]
    out = tmp_path / "bd"
    main(["--out", str(out), "--family", "fast_dllm_v2", "--bd-size", "4", "--tokenizer", str(base),
          "--init-weights", str(base), *common])
    config = json.loads((out / "config.json").read_text())
    assert config["bd_size"] == 4 and config["dllm_block_origin"] == "prompt" and "dllm_attention" not in config
    main(["--out", str(tmp_path / "again"), "--init", str(out), *common])  # a student continues
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "no"), "--init", str(base), *common])
    assert "not a D2F student" in capsys.readouterr().err


def test_d2f_loss_weights_each_masked_token_by_its_rate_and_a_sure_teacher_is_the_data():
    from dllm.train.objectives import d2f_loss

    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(3, 10, 7, generator=gen)
    target = torch.randint(7, (3, 10), generator=gen)
    masked = torch.rand(3, 10, generator=gen) < 0.5
    rate = torch.rand(3, 10, generator=gen) * 0.5 + 0.2
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, 7), target.reshape(-1), reduction="none").reshape(3, 10)
    expected = (ce[masked] / rate[masked]).mean()
    assert torch.allclose(d2f_loss(logits, target, masked, rate), expected)
    sure = torch.nn.functional.one_hot(target, 7).float() * 1e4
    assert torch.allclose(d2f_loss(logits, target, masked, rate, sure), expected)


def test_a_teacher_distils_into_a_student_of_its_layout_only(tmp_path, capsys):
    data = require_data()
    base = default_model_path()  # LLaDA layout: no logit shift
    common = ["--data", str(data), "--objective", "d2f", "--steps", "1", "--batch-size", "2", "--eval-every", "1",
              "--heldout-per-task", "1", "--tasks", "waiting_line/copy", "--threads", "1", "--tokenizer", str(base),
              "--init-weights", str(base), "--d2f-teacher", str(base)]
    main(["--out", str(tmp_path / "llada"), "--family", "llada", *common])
    assert dllm.load(tmp_path / "llada").model.attention == "block_causal"
    with pytest.raises(SystemExit, match="logit shift"):
        main(["--out", str(tmp_path / "dream"), "--family", "dream", *common])
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "no"), *common[:2], *common[4:]])
    assert "add --objective d2f" in capsys.readouterr().err
