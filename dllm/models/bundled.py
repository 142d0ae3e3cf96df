"""Models that ship inside the package, found by name: ``dllm.load("dllm-waitingline-llada")``.

Each is a checkpoint directory in its family's original layout under ``dllm/assets/models/``
(dllm-waitingline-llada, -dream, -bd, the LLaDA2-layout MoE dllm-waitingline-moe, -bd's D2F
student dllm-waitingline-d2f, the uniform-state DiffusionGemma-layout dllm-waitingline-gemma and
dllm-waitingline-llada-cf, -llada after dParallel's certainty-forcing distillation),
with a card (README.md) and, once measured, ``scores.json`` (its
ParallelBench scores at one token per step, with the results file they were read from).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dllm.models.hub import hub_label, hub_snapshot, is_hub_id

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
        """Parameter count from the safetensors header (no weights loaded). A MoE router's
        ``expert_bias`` (LLaDA2) is a buffer moved by the balance rule, not a trained parameter,
        and is not counted; nor are DiffusionGemma's ``layer_scalar`` buffers (a tied LM head is
        not stored, so it counts once)."""
        from safetensors import safe_open

        total = 0
        with safe_open(str(self.path / "model.safetensors"), framework="numpy") as f:  # shapes only: no torch
            for name in f.keys():
                if name.endswith((".expert_bias", ".layer_scalar")):
                    continue
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
    """How results name a model: a bundled model by its name, a hub snapshot as ``org/name@commit``,
    any other by its path as given (so no machine's install location ends up in a results file)."""
    resolved = Path(path).resolve()
    for model in bundled_models().values():
        if model.path.resolve() == resolved:
            return model.name
    return hub_label(path) or str(path)


def resolve_model_path(model: str | os.PathLike | None, revision: str | None = None) -> Path:
    """A checkpoint directory from a path, a bundled model's name, a hub id (``org/name``, at
    ``revision``; ``dllm.models.hub``), or None (the default model).

    An existing directory always wins over a name, so a local folder called like a bundled
    model or a hub id is what it says; a leading ``~`` is the user's home, as in a shell."""
    if isinstance(model, str) and not model.strip():  # Path("") is the working directory
        raise ValueError("the model path is empty; pass a checkpoint directory, a bundled model's name or a hub id "
                         "(or None: the default model)")
    if model is not None and Path(model).expanduser().exists():
        _no_revision(revision, f"{str(model)!r} is a local directory")
        return Path(model).expanduser()
    models = bundled_models()
    if model is None or (isinstance(model, str) and model in models):
        _no_revision(revision, f"{model or DEFAULT_MODEL!r} is a bundled model")
        return models[model].path if model is not None else BUNDLED_DIR / DEFAULT_MODEL
    if isinstance(model, str) and is_hub_id(model):
        return hub_snapshot(model, revision)
    raise FileNotFoundError(
        f"model directory {str(model)!r} does not exist, is not a bundled model's name "
        f"({', '.join(models) or 'none'}; `dllm models` lists them) and is not a Hugging Face hub id "
        "(org/name); pass a checkpoint directory, a bundled model's name or a hub id")


def _no_revision(revision: str | None, what: str) -> None:
    if revision is not None:
        raise ValueError(f"revision={revision!r} applies to Hugging Face hub ids only, and {what}; "
                         "drop the revision (or pass the hub id)")
