"""Shards without an index: the loader reads every ``*.safetensors`` file of the directory (some
exports write shards and no ``model.safetensors.index.json``), and gets the indexed weights."""
from __future__ import annotations

import torch

from dllm.models import load_model
from dllm.models.tiny import write_tiny_checkpoint


def test_every_shard_is_read_when_no_index_names_them(tmp_path):
    indexed = write_tiny_checkpoint(tmp_path / "indexed", "llada", seed=5, num_shards=3)
    bare = write_tiny_checkpoint(tmp_path / "bare", "llada", seed=5, num_shards=3)
    (bare / "model.safetensors.index.json").unlink()
    assert len(list(bare.glob("*.safetensors"))) == 3  # the arrangement: three shards, no index
    expected, loaded = load_model(indexed).state_dict(), load_model(bare).state_dict()
    assert expected.keys() == loaded.keys()
    assert all(torch.equal(expected[k], loaded[k]) for k in expected)
