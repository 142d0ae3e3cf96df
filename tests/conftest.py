"""Shared fixtures: tiny random checkpoints of each family, written once per session."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("DLLM_KERNELS", "auto")


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    """{"llada": dir, "dream": dir, "llada_sharded": dir, "dream_sharded": dir}."""
    from dllm.models.tiny import write_tiny_checkpoint

    root = tmp_path_factory.mktemp("tiny")
    return {
        "llada": write_tiny_checkpoint(root / "llada", "llada", seed=1),
        "dream": write_tiny_checkpoint(root / "dream", "dream", seed=2),
        "llada_sharded": write_tiny_checkpoint(root / "llada_sh", "llada", seed=3, num_shards=3),
        "dream_sharded": write_tiny_checkpoint(root / "dream_sh", "dream", seed=4, num_shards=2),
    }


@pytest.fixture(scope="session")
def tiny_models(tiny_dirs):
    """Loaded float32 models for the unsharded tiny checkpoints."""
    import dllm

    return {name: dllm.load(tiny_dirs[name]) for name in ("llada", "dream")}
