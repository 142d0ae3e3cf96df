"""Each loader error is raised, before any model work, with a message naming the fix."""
from __future__ import annotations

import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

import dllm
from dllm.models import CheckpointError, load_model


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_directory_without_config(tmp_path):
    with pytest.raises(CheckpointError, match="no config.json"):
        load_model(tmp_path)


def test_directory_without_weights(tiny_dirs, tmp_path):
    d = _copy(tiny_dirs["llada"], tmp_path / "m")
    (d / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no weights"):
        load_model(d)


def test_unknown_model_type(tiny_dirs, tmp_path):
    d = _copy(tiny_dirs["llada"], tmp_path / "m")
    raw = json.loads((d / "config.json").read_text())
    raw["model_type"] = "gpt2"
    (d / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="unknown model_type 'gpt2'.*'dream'.*'llada'"):
        load_model(d)


def test_missing_unexpected_and_misshaped_tensors_are_named(tiny_dirs, tmp_path):
    d = _copy(tiny_dirs["llada"], tmp_path / "m")
    tensors = load_file(str(d / "model.safetensors"))
    del tensors["model.transformer.blocks.1.up_proj.weight"]
    tensors["model.transformer.blocks.0.extra.weight"] = tensors["model.transformer.ln_f.weight"].clone()
    tensors["model.transformer.blocks.0.q_proj.weight"] = tensors["model.transformer.blocks.0.q_proj.weight"][:8].clone()
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError) as err:
        load_model(d)
    msg = str(err.value)
    assert "missing tensors: ['model.transformer.blocks.1.up_proj.weight']" in msg
    assert "unexpected tensors: ['model.transformer.blocks.0.extra.weight']" in msg
    assert "model.transformer.blocks.0.q_proj.weight: checkpoint [8, 64] != config [64, 64]" in msg


def test_missing_shard(tiny_dirs, tmp_path):
    d = _copy(tiny_dirs["llada_sharded"], tmp_path / "m")
    next(d.glob("model-00002-*.safetensors")).unlink()
    with pytest.raises(CheckpointError, match="shards listed in model.safetensors.index.json are missing"):
        load_model(d)


def test_prompt_longer_than_context(tiny_models):
    model = tiny_models["llada"]
    too_long = [[5] * (model.model.config.max_sequence_length - 10)]
    with pytest.raises(ValueError, match="context of 1024; shorten the prompt or lower gen_length"):
        model.generate_ids(too_long, dllm.GenerationConfig(gen_length=16))


@pytest.mark.parametrize("kwargs,match", [
    ({"gen_length": 30, "block_length": 8}, "not a multiple of block_length"),
    ({"gen_length": 32, "block_length": 8, "steps": 6}, "multiple of the number of blocks"),
    ({"policy": "nope"}, "unknown unmasking rule 'nope'; known: .*low_confidence"),
    ({"policy": "low_confidence", "policy_args": {"tau": 1}}, "has no option"),
    ({"cache": "bogus"}, "unknown cache 'bogus'"),
])
def test_bad_generation_options(tiny_models, kwargs, match):
    with pytest.raises(ValueError, match=match):
        tiny_models["llada"].generate("hello", **kwargs)


def test_bfloat16_load(tiny_dirs):
    import torch

    model = load_model(tiny_dirs["dream"], dtype="bfloat16")
    assert model.embed.weight.dtype == torch.bfloat16
    assert not any(p.is_meta for p in model.parameters())
