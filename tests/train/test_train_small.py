"""train_small: a given tokenizer is reused unchanged, so a rerun reproduces the weights; the
data folder it needs is named when absent."""
from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file

from dllm.api import default_model_path
from dllm.train.train_small import main
from tests.pb_data import require_data

TINY_RUN = ["--steps", "2", "--batch-size", "4", "--d-model", "32", "--n-layers", "1", "--n-heads", "2",
            "--mlp-hidden", "64", "--eval-every", "2", "--heldout-per-task", "1",
            "--tasks", "waiting_line/copy", "--threads", "1"]


def test_reused_tokenizer_keeps_its_ids_and_reruns_give_the_same_weights(tmp_path):
    data = require_data()
    shipped = default_model_path()
    runs = [tmp_path / "a", tmp_path / "b"]
    for out in runs:
        main(["--out", str(out), "--data", str(data), "--tokenizer", str(shipped), *TINY_RUN])
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (runs[0] / name).read_bytes() == (shipped / name).read_bytes()
    shipped_config = json.loads((shipped / "config.json").read_text())
    config = json.loads((runs[0] / "config.json").read_text())
    for key in ("vocab_size", "mask_token_id", "eos_token_id", "pad_token_id"):
        assert config[key] == shipped_config[key], key
    first, second = (load_file(str(out / "model.safetensors")) for out in runs)
    assert first.keys() == second.keys()
    assert all(first[k].equal(second[k]) for k in first)


def test_tokenizer_with_init_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "o"), "--init", str(default_model_path()),
              "--tokenizer", str(default_model_path())])
    assert "--init already brings its checkpoint's tokenizer and weights; drop --tokenizer" in capsys.readouterr().err


def test_missing_data_folder_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no ParallelBench data at .*Pass --data DIR or set DLLM_PARALLELBENCH_DIR"):
        main(["--out", str(tmp_path / "o"), "--data", str(tmp_path / "absent"), *TINY_RUN])
