"""Load an original Hugging Face checkpoint directory into a DiffusionTransformer.

No remote code, no network: config.json is parsed by the family's own dataclass, weights are
read by their original names from single or sharded safetensors, straight into a module built
on the meta device (``assign=True``), so the weights are never held twice.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from dllm.models.config import ArchConfig
from dllm.models.registry import family_for, weight_map
from dllm.models.transformer import DiffusionTransformer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded; the message says what to fix."""


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"dtype {dtype} is not supported; use one of {list(DTYPES)}")
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported; use one of {list(DTYPES)}")
    return DTYPES[dtype]


def read_config(path: Path) -> tuple[dict, ArchConfig]:
    """Parse config.json into the family's ArchConfig (raises CheckpointError / ValueError)."""
    config_file = path / "config.json"
    if not path.is_dir():
        raise CheckpointError(f"{path} is not a directory; pass a checkpoint directory")
    if not config_file.is_file():
        raise CheckpointError(
            f"no config.json in {path}; pass the directory that holds config.json and *.safetensors"
        )
    raw = json.loads(config_file.read_text())
    family = family_for(raw.get("model_type"))
    return raw, family.parse_config(raw)


def safetensors_files(path: Path) -> dict[str, Path]:
    """Tensor name -> file, from model.safetensors.index.json or the *.safetensors present."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map_ = json.loads(index.read_text())["weight_map"]
        missing_files = sorted({f for f in weight_map_.values() if not (path / f).is_file()})
        if missing_files:
            raise CheckpointError(f"shards listed in {index.name} are missing: {missing_files}")
        return {name: path / f for name, f in weight_map_.items()}
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(
            f"no weights in {path}: expected model.safetensors or a sharded "
            "model.safetensors.index.json (PyTorch .bin files are not supported; convert them)"
        )
    names: dict[str, Path] = {}
    for file in files:
        with safe_open(file, framework="pt") as f:
            names.update({k: file for k in f.keys()})
    return names


def _check_tensors(files: dict[str, Path], expected: dict[str, tuple[int, ...]]) -> None:
    missing = sorted(set(expected) - set(files))
    unexpected = sorted(set(files) - set(expected))
    misshaped = []
    for name in sorted(set(expected) & set(files)):
        with safe_open(files[name], framework="pt") as f:
            shape = tuple(f.get_slice(name).get_shape())
        if shape != expected[name]:
            misshaped.append(f"{name}: checkpoint {list(shape)} != config {list(expected[name])}")
    problems = []
    if missing:
        problems.append(f"missing tensors: {missing}")
    if unexpected:
        problems.append(f"unexpected tensors: {unexpected}")
    if misshaped:
        problems.append(f"mis-shaped tensors: {misshaped}")
    if problems:
        raise CheckpointError(
            "checkpoint does not match its config.json ("
            + "; ".join(problems)
            + "). Check that config.json belongs to these weights."
        )


def load_model(
    path: str | Path, *, dtype: str | torch.dtype = "float32", device: str | torch.device = "cpu"
) -> DiffusionTransformer:
    """Load a LLaDA / Dream (or registered) checkpoint directory for inference."""
    path = Path(path)
    torch_dtype = resolve_dtype(dtype)
    raw, cfg = read_config(path)
    family = family_for(raw.get("model_type"))
    names = weight_map(family, cfg)
    files = safetensors_files(path)
    with torch.device("meta"):
        model = DiffusionTransformer(cfg)
    module_shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    _check_tensors(files, {ckpt: module_shapes[mod] for ckpt, mod in names.items()})
    state = {}
    by_file: dict[Path, list[str]] = {}
    for ckpt in names:
        by_file.setdefault(files[ckpt], []).append(ckpt)
    for file, ckpts in by_file.items():
        with safe_open(file, framework="pt", device="cpu") as f:
            for ckpt in ckpts:
                state[names[ckpt]] = f.get_tensor(ckpt).to(device=device, dtype=torch_dtype)
    if cfg.tie_embeddings:
        state["lm_head.weight"] = state["embed.weight"]
    model.load_state_dict(state, assign=True, strict=True)
    return model.eval().requires_grad_(False)
