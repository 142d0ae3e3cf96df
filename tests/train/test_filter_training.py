"""Learn2PD training: oracle traces from the runtime, the fit, and ``dllm train-filter`` end to end."""
from __future__ import annotations

import json

import torch

from dllm import GenerationConfig
from dllm.cli import main
from dllm.engine.decoding import decode
from dllm.train.learn2pd import FilterTraining, collect_traces, oracle_decode, train_filter
from tests.pb_data import require_data


def test_oracle_traces_cover_every_step(tiny_models):
    model = tiny_models["llada"].model
    prompts = [[5, 17, 42], [7, 8, 9, 10, 11]]
    conf, labels, final, redecoded = oracle_decode(model, prompts, gen_length=16, block_length=8)
    assert redecoded.tolist() == final.tolist()  # the oracle only ever writes the final answer
    cfg = GenerationConfig(gen_length=16, block_length=8, steps=16, stop_at_eos=False)
    assert final.tolist() == decode(model, prompts, cfg).answer.tolist()  # y: one token per step
    assert conf.shape[1] == labels.shape[1] == 8
    # each live row adds one sample per step, and each step commits at least one token
    assert 2 * 2 <= conf.shape[0] <= 2 * 16
    assert bool(((labels == 0) | (labels == 1)).all()) and bool(((conf >= 0) & (conf <= 1)).all())
    assert collect_traces(model, prompts, 16, 8)[0].tolist() == conf.tolist()


def test_fit_reports_accuracy_and_false_positives():
    torch.manual_seed(0)
    labels = (torch.rand(400, 8) > 0.5).float()  # a position is right exactly when it is confident
    conf = torch.where(labels > 0, 0.7 + 0.3 * torch.rand(400, 8), 0.3 * torch.rand(400, 8))
    module, report = train_filter(conf, labels, FilterTraining(block_length=8, epochs=1500, tau=0.5))
    assert report["val_accuracy"] > 0.9 and report["train_accuracy"] > 0.9
    assert 0 <= report["val_false_positive_rate"] < 0.1
    assert module.width == 8


def test_train_filter_command_end_to_end(tiny_dirs, tiny_models, tmp_path, capsys):
    data = require_data()
    out = tmp_path / "filter"
    code = main(["train-filter", "--model", str(tiny_dirs["llada"]), "--data", str(data), "--out", str(out),
                 "--tasks", "waiting_line/copy", "--samples", "2", "--block-length", "8", "--epochs", "20"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert {"train_accuracy", "train_false_positive_rate", "samples"} <= set(report)
    meta = json.loads((out / "filter.json").read_text())
    assert meta["width"] == 8 and meta["block_length"] == 8
    cfg = GenerationConfig(gen_length=16, block_length=8, policy="learn2pd", policy_args={"filter": str(out)})
    result = decode(tiny_models["llada"].model, [[5, 17, 42]], cfg)
    assert not bool((result.answer == tiny_models["llada"].model.mask_token_id).any())


def test_train_filter_rejects_a_block_length_that_does_not_divide(tiny_dirs, tmp_path, capsys):
    data = require_data()
    code = None
    try:
        code = main(["train-filter", "--model", str(tiny_dirs["llada"]), "--data", str(data),
                     "--out", str(tmp_path / "f"), "--tasks", "waiting_line/copy", "--samples", "1",
                     "--block-length", "7"])
    except SystemExit as err:
        code = err.code
    assert code not in (0, None)
    assert not (tmp_path / "f").exists()
