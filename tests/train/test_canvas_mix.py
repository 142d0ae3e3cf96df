"""Canvas mix: batches at a drawn answer length (end-of-text padded, at least the answer plus
one end-of-text, a block multiple for block diffusion) and in the one-shot format; off, the
training stream is exactly the old one."""
from __future__ import annotations

import json
import random

import pytest
import torch

from dllm.api.model import default_model_path
from dllm.models.tokenizer import load_tokenizer
from dllm.train.canvas_mix import CanvasMix
from dllm.train.corpus import TaskCorpus
from dllm.train.train_small import draw_rows, main
from tests.pb_data import require_data

TASKS = ("waiting_line/copy", "waiting_line/sort", "puzzle/latin_square_n4")


def _corpus(seed: int = 5) -> TaskCorpus:
    return TaskCorpus(require_data(), seed=seed, tasks=TASKS)


def test_long_batches_pad_every_answer_with_end_of_text_to_one_drawn_length():
    tok = load_tokenizer(default_model_path())
    mix = CanvasMix(long_share=1.0, min_gen_length=8, max_gen_length=128)
    lengths = set()
    for seed in range(6):
        rows = draw_rows(tok, _corpus(seed), 6, mix, random.Random(seed))
        drawn = random.Random(seed)
        random_share = drawn.random()
        assert random_share < 1.0
        canvas = drawn.randint(8, 128)
        for _prompt, answer in rows:
            body = answer[: answer.index(tok.eos_token_id)]
            assert len(answer) == max(canvas, len(body) + 1)  # never clipped: answer + end-of-text at least
            assert set(answer[len(body):]) == {tok.eos_token_id}
            lengths.add(len(answer))
    assert len(lengths) > 3


def test_block_diffusion_canvases_are_block_multiples():
    tok = load_tokenizer(default_model_path())
    mix = CanvasMix(long_share=1.0, min_gen_length=9, max_gen_length=50)
    for seed in range(5):
        rows = draw_rows(tok, _corpus(seed), 4, mix, random.Random(seed), multiple=8)
        assert all(len(answer) % 8 == 0 for _p, answer in rows)


def test_one_shot_batches_show_one_more_example_of_the_task_first():
    tok = load_tokenizer(default_model_path())
    corpus = _corpus()
    ex = corpus.sample("waiting_line/copy", shots=1)
    roles = [m["role"] for m in ex.messages]
    assert roles == ["user", "assistant", "user"]
    shown = ex.sample["input"]["icl_examples"][0]
    assert shown["input"]["context"] != ex.sample["input"]["context"]
    assert shown["input"]["context"] not in corpus.excluded
    one = draw_rows(tok, _corpus(), 2, CanvasMix(one_shot_share=1.0), random.Random(0))
    zero = draw_rows(tok, _corpus(), 2, None, None)
    assert all(len(p1) > len(p0) for (p1, _), (p0, _) in zip(one, zero))


def test_without_a_mix_the_stream_is_the_old_one():
    tok = load_tokenizer(default_model_path())
    off = draw_rows(tok, _corpus(), 8, CanvasMix(), random.Random(0))
    assert off == draw_rows(tok, _corpus(), 8, None, None)
    assert {len(a) for _p, a in off} <= {32, 64}  # each task's own gen length (Latin square: 64)


@pytest.mark.parametrize("args, message", [
    (["--long-canvas", "1.5"], "long_share 1.5: a share of batches, between 0 and 1"),
    (["--gen-lengths", "64", "32"], "gen length range [64, 32] is empty"),
])
def test_mix_options_are_checked(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "o"), *args])
    assert message in capsys.readouterr().err


def test_a_mixed_run_evaluates_long_and_one_shot_and_drops_the_zero_shot_marker(tmp_path):
    out = tmp_path / "run"
    main(["--out", str(out), "--data", str(require_data()), "--tokenizer", str(default_model_path()),
          "--steps", "2", "--batch-size", "4", "--d-model", "32", "--n-layers", "1", "--n-heads", "2",
          "--mlp-hidden", "64", "--eval-every", "2", "--heldout-per-task", "1", "--tasks", "waiting_line/copy",
          "--threads", "1", "--long-canvas", "0.5", "--gen-lengths", "8", "40", "--one-shot", "0.5"])
    record = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()][-1]
    ev = record["eval"]
    assert {"long", "one_shot", "selection"} <= ev.keys()
    assert ev["selection"] == pytest.approx((ev["mean"] + ev["long"]["mean"] + ev["one_shot"]["mean"]) / 3)
    assert "dllm_prompt_shots" not in json.loads((out / "config.json").read_text())
    assert torch.isfinite(torch.tensor(record["loss"]))
