"""What a user sees of the package and a model: ``dllm.__version__``, ``repr(model)``, and the
numbers ``dllm models --json`` prints."""
from __future__ import annotations

import json
import tomllib
from importlib.metadata import PackageNotFoundError
from pathlib import Path

import dllm
from dllm.cli import main

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_version_is_the_packages_and_falls_back_to_pyproject(monkeypatch):
    from importlib.metadata import version

    assert dllm.__version__ == version("dllm")

    def not_installed(name):
        raise PackageNotFoundError(name)

    monkeypatch.setattr("importlib.metadata.version", not_installed)
    assert dllm._version() == tomllib.loads(PYPROJECT.read_text())["project"]["version"]


def test_repr_names_the_model_family_size_device_and_dtype(tiny_dirs):
    lm = dllm.load(tiny_dirs["dream"], device="cpu", dtype="float32")
    params = sum(p.numel() for p in lm.model.parameters())
    assert repr(lm) == (f"DiffusionLM({tiny_dirs['dream'].name!r}, family='dream', "
                        f"parameters={params / 1e6:.2f}M, device='cpu', dtype='float32')")


def test_models_json_prints_scores_without_float_noise(capsys):
    assert main(["models", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    scores = [r["score"] for r in rows if r["score"] is not None]
    assert scores and all(len(repr(s).split(".")[-1]) <= 6 for s in scores)
