"""Bundled models load by name as by path, and `dllm models` lists them."""
from __future__ import annotations

import json

import pytest
import torch

import dllm
from dllm.cli import main
from dllm.models.bundled import bundled_models


def test_load_by_name_is_load_by_path():
    models = bundled_models()
    assert models, "the package ships at least one model"
    for name, model in models.items():
        by_name, by_path = dllm.load(name), dllm.load(model.path)
        assert by_name.path == model.path
        for (n1, p1), (n2, p2) in zip(by_name.model.state_dict().items(), by_path.model.state_dict().items()):
            assert n1 == n2 and torch.equal(p1, p2)


def test_unknown_name_lists_the_bundled_models():
    with pytest.raises(FileNotFoundError, match="not a bundled model's name .*dllm-waitingline-llada"):
        dllm.load("no-such-model")


def test_models_command_lists_each_model_with_its_size(capsys):
    assert main(["models", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["name"] for r in rows} == set(bundled_models())
    for row in rows:
        lm = dllm.load(row["name"])
        tensors = {p.data_ptr(): p.numel() for p in lm.model.parameters()}  # a tied LM head counts once
        assert row["parameters"] == sum(tensors.values())
        assert row["size_mb"] < 10, "bundled models stay under 10 MB"


def test_results_name_a_bundled_model_by_its_name_not_its_install_path(tmp_path):
    from dllm.models.bundled import model_label

    for name, model in bundled_models().items():
        assert model_label(model.path) == name
    assert model_label(tmp_path) == str(tmp_path)
