"""Models that ship inside the package, found by name: ``dllm.load("dllm-waitingline-llada")``.

Each is a checkpoint directory in its family's original layout under ``dllm/assets/models/``,
with a card (README.md) and, once measured, ``scores.json`` (its ParallelBench scores at one
token per step, with the results file they were read from).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUNDLED_DIR = Path(__file__).resolve().parent.parent / "assets" / "models"
DEFAULT_MODEL = "dllm-waitingline-llada"


@dataclass(frozen=True, slots=True)
class BundledModel:
    name: str
    path: Path

    @property
    def config(self) -> dict[str, Any]:
        return json.loads((self.path / "config.json").read_text())

    @property
    def size_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file())

    @property
    def parameters(self) -> int:
        """Parameter count from the safetensors header (no weights loaded)."""
        from safetensors import safe_open

        total = 0
        with safe_open(str(self.path / "model.safetensors"), framework="pt") as f:
            for name in f.keys():
                n = 1
                for dim in f.get_slice(name).get_shape():
                    n *= dim
                total += n
        return total

    @property
    def scores(self) -> dict[str, Any] | None:
        path = self.path / "scores.json"
        return json.loads(path.read_text()) if path.is_file() else None


def bundled_models() -> dict[str, BundledModel]:
    """Every shipped model by name (directories holding a config.json)."""
    if not BUNDLED_DIR.is_dir():
        return {}
    return {d.name: BundledModel(d.name, d) for d in sorted(BUNDLED_DIR.iterdir()) if (d / "config.json").is_file()}


def model_label(path: Path) -> str:
    """How results name a model: a bundled model by its name, any other by its path as given
    (so no machine's install location ends up in a results file)."""
    resolved = Path(path).resolve()
    for model in bundled_models().values():
        if model.path.resolve() == resolved:
            return model.name
    return str(path)


def resolve_model_path(model: str | os.PathLike | None) -> Path:
    """A checkpoint directory from a path, a bundled model's name, or None (the default model).

    An existing directory always wins over a name, so a local folder called like a bundled
    model is what it says."""
    if model is None:
        return BUNDLED_DIR / DEFAULT_MODEL
    path = Path(model)
    if path.exists():
        return path
    models = bundled_models()
    if isinstance(model, str) and model in models:
        return models[model].path
    raise FileNotFoundError(
        f"model directory {str(model)!r} does not exist and is not a bundled model's name "
        f"({', '.join(models) or 'none'}; "
        "`dllm models` lists them); pass a checkpoint directory (dllm never downloads: fetch a Hugging "
        "Face model's files into a directory first, e.g. with `huggingface-cli download ID --local-dir DIR`)")
