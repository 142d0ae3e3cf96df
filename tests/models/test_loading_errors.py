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
    with pytest.raises(ValueError, match="unknown model_type 'gpt2'.*masked-diffusion.*'dream'.*'llada'.*autoregres") \
            as err:
        load_model(d)
    assert str(err.value).count("'llada'") == 1  # two families share it: named once


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
    with pytest.raises(CheckpointError, match=r"shards listed in model.safetensors.index.json are missing from .*m: "
                                              r"\['model-00002-of-00003.safetensors'\]; download them again"):
        load_model(d)


def test_index_pointing_a_tensor_at_the_wrong_shard_names_index_shard_and_tensor(tiny_dirs, tmp_path):
    d = _copy(tiny_dirs["llada_sharded"], tmp_path / "m")
    index_file = d / "model.safetensors.index.json"
    index = json.loads(index_file.read_text())
    name = "model.transformer.blocks.0.q_proj.weight"
    right = index["weight_map"][name]
    wrong = next(f for f in sorted(set(index["weight_map"].values())) if f != right)
    index["weight_map"][name] = wrong
    index_file.write_text(json.dumps(index))
    with pytest.raises(CheckpointError) as err:
        load_model(d)
    msg = str(err.value)
    assert "model.safetensors.index.json" in msg and f"{name} -> {wrong} (it is in ['{right}'])" in msg
    assert "Fix those entries of its weight_map" in msg


def test_prompt_longer_than_context(tiny_models):
    model = tiny_models["llada"]
    too_long = [[5] * (model.model.config.max_sequence_length - 10)]
    with pytest.raises(ValueError, match="context of 1024; shorten the prompt or lower gen_length"):
        model.generate_ids(too_long, dllm.GenerationConfig(gen_length=16))


@pytest.mark.parametrize("kwargs,match", [
    ({"gen_length": 30, "block_length": 8}, "not a multiple of block_length"),
    ({"gen_length": 32, "block_length": 8, "steps": 6}, "multiple of the number of blocks"),
    ({"policy": "nope"}, "unknown unmasking rule 'nope'; known: .*low_confidence"),
    ({"policy": "low_confidence", "policy_args": {"gamma": 1}}, "has no option"),
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


def _edit_config(d, **changes):
    raw = json.loads((d / "config.json").read_text())
    for key, value in changes.items():
        if value is _DROP:
            del raw[key]
        else:
            raw[key] = value
    (d / "config.json").write_text(json.dumps(raw))


_DROP = object()


@pytest.mark.parametrize("text,match", [
    ("{oops", r"config.json is not valid JSON .*restore"),
    ("[1, 2]", r"config.json holds a JSON list, not an object"),
])
def test_config_that_is_not_a_json_object_names_the_file(tiny_dirs, tmp_path, text, match):
    d = _copy(tiny_dirs["llada"], tmp_path / "m")
    (d / "config.json").write_text(text)
    with pytest.raises(CheckpointError, match=match):
        dllm.load(d)


@pytest.mark.parametrize("family,key", [("llada", "n_heads"), ("llada", "d_model"),
                                        ("dream", "num_attention_heads"), ("dream", "vocab_size")])
def test_config_missing_a_field_names_it(tiny_dirs, tmp_path, family, key):
    d = _copy(tiny_dirs[family], tmp_path / "m")
    _edit_config(d, **{key: _DROP})
    with pytest.raises(CheckpointError, match=f"config.json has no '{key}', which a {family} config needs"):
        load_model(d)


@pytest.mark.parametrize("family,key,value,match", [
    ("llada", "n_heads", "4", r"n_heads expects int, got '4' \(str\)"),
    ("dream", "num_attention_heads", 4.5, r"n_heads expects int, got 4.5 \(float\)"),
    ("llada", "n_layers", 0, "n_layers must be positive"),
    ("llada", "eos_token_id", None, r"eos_token_ids expects a list of int"),
    ("dream", "pad_token_id", 10_000, "pad_token_id=10000 is outside the vocabulary"),
])
def test_config_with_wrong_values_names_them(tiny_dirs, tmp_path, family, key, value, match):
    d = _copy(tiny_dirs[family], tmp_path / "m")
    _edit_config(d, **{key: value})
    with pytest.raises(CheckpointError, match=match):
        load_model(d)


@pytest.mark.parametrize("family,key,value", [
    # LLaDA's OLMo-style switches (configuration_llada.py) that change the math under the same tensor
    # names, or the names: LLaDA-8B / 1.5 set alibi false, rope true, rms norms, llama blocks of SiLU
    ("llada", "alibi", True), ("llada", "rope", False), ("llada", "layer_norm_type", "default"),
    ("llada", "activation_type", "swiglu"), ("llada", "block_type", "sequential"), ("llada", "scale_logits", True),
    ("llada", "input_emb_norm", True), ("llada", "clip_qkv", 8.0), ("llada", "include_bias", True),
    # Qwen2 keys Dream and Fast-dLLM v2 publish as null / false / full attention
    ("dream", "rope_scaling", {"type": "yarn", "factor": 4.0}), ("dream", "use_sliding_window", True),
    ("dream", "layer_types", ["full_attention", "sliding_attention"]),
])
def test_a_config_switch_dllm_does_not_compute_is_refused_by_name(tiny_dirs, tmp_path, family, key, value):
    """Ignoring such a key would load the weights and compute another model."""
    d = _copy(tiny_dirs[family], tmp_path / "m")
    _edit_config(d, **{key: value})
    with pytest.raises(CheckpointError, match=rf"config\.json \({family}\): {key}=.* is not supported"):
        load_model(d)


@pytest.mark.parametrize("n_kv_heads,mqa,expected", [(None, True, 1), (None, None, 4), (4, None, 4), (4, False, 4)])
def test_llada_kv_heads_follow_effective_n_kv_heads(tiny_dirs, tmp_path, n_kv_heads, mqa, expected):
    """configuration_llada.py's effective_n_kv_heads: n_kv_heads, else 1 under multi_query_attention,
    else n_heads (the tiny model has 4 heads)."""
    d = _copy(tiny_dirs["llada"], tmp_path / "m")
    _edit_config(d, n_kv_heads=n_kv_heads, multi_query_attention=mqa)
    from dllm.models.llada import parse_config

    assert parse_config(json.loads((d / "config.json").read_text())).n_kv_heads == expected


def test_llada_n_kv_heads_that_contradict_multi_query_attention_are_refused(tiny_dirs, tmp_path):
    d = _copy(tiny_dirs["llada"], tmp_path / "m")
    _edit_config(d, n_kv_heads=4, multi_query_attention=True)
    with pytest.raises(CheckpointError, match=r"n_kv_heads=4 contradicts multi_query_attention=True"):
        load_model(d)


def test_llada_without_mlp_hidden_size_takes_mlp_ratio_times_d_model(tiny_dirs, tmp_path):
    """configuration_llada.py: the MLP is mlp_ratio * d_model wide when mlp_hidden_size is null."""
    d = _copy(tiny_dirs["llada"], tmp_path / "m")
    raw = json.loads((d / "config.json").read_text())
    _edit_config(d, mlp_hidden_size=None, mlp_ratio=2)
    assert raw["mlp_hidden_size"] == 2 * raw["d_model"]  # the tiny checkpoint's width
    assert load_model(d).config.mlp_hidden_size == 2 * raw["d_model"]


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_mask_token_equal_to_end_of_text_is_refused(tiny_dirs, tmp_path, family):
    d = _copy(tiny_dirs[family], tmp_path / "m")
    eos = json.loads((d / "config.json").read_text())["eos_token_id"]
    _edit_config(d, mask_token_id=eos)
    with pytest.raises(CheckpointError, match=f"mask_token_id={eos} is also an end-of-text id"):
        load_model(d)


@pytest.mark.parametrize("index", [{"metadata": {}}, {"weight_map": ["a.safetensors"]}])
def test_index_without_weight_map(tiny_dirs, tmp_path, index):
    d = _copy(tiny_dirs["llada_sharded"], tmp_path / "m")
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match='model.safetensors.index.json has no "weight_map" object'):
        load_model(d)


def test_index_that_is_not_json(tiny_dirs, tmp_path):
    d = _copy(tiny_dirs["llada_sharded"], tmp_path / "m")
    (d / "model.safetensors.index.json").write_text("weight_map: oops")
    with pytest.raises(CheckpointError, match="model.safetensors.index.json is not valid JSON"):
        load_model(d)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_safetensors_names_the_file(tiny_dirs, tmp_path, damage):
    d = _copy(tiny_dirs["llada"], tmp_path / "m")
    weights = d / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(b"not a safetensors file" * 4 if damage == "garbage" else data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model.safetensors .*(not a readable safetensors file|cannot be read)"):
        load_model(d)


@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json"])
def test_broken_tokenizer_files_name_the_file(tiny_dirs, tmp_path, name):
    d = _copy(tiny_dirs["llada"], tmp_path / "m")
    (d / name).write_text('{"model": oops')
    with pytest.raises(CheckpointError, match=f"{name} (cannot be read as a fast tokenizer|is not valid JSON)"):
        dllm.load(d)


def test_tokenizer_larger_than_the_vocabulary_is_refused_at_load(tiny_dirs, tmp_path):
    d = _copy(tiny_dirs["llada"], tmp_path / "m")
    bigger = dllm.api.model.default_model_path()  # a tokenizer with more tokens than the tiny model's rows
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(bigger / name, d / name)
    with pytest.raises(CheckpointError, match=r"has \d+ tokens but the model's vocabulary has 300 rows"):
        dllm.load(d)


@pytest.mark.parametrize("damage", ["missing", "larger than the vocabulary"])
def test_a_tokenizer_that_cannot_serve_is_refused_before_any_weight_is_read(tiny_dirs, tmp_path, monkeypatch, damage):
    """An 8B checkpoint takes minutes to read: its tokenizer is checked first."""
    d = _copy(tiny_dirs["llada"], tmp_path / "m")
    if damage == "missing":
        (d / "tokenizer.json").unlink()
    else:
        bigger = dllm.api.model.default_model_path()
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(bigger / name, d / name)

    def no_weights(*args, **kwargs):
        raise AssertionError("the weights were read before the tokenizer was checked")

    monkeypatch.setattr(dllm.api.model, "load_model", no_weights)
    with pytest.raises(CheckpointError, match="no tokenizer.json" if damage == "missing" else "has \\d+ tokens but"):
        dllm.load(d)


def test_special_id_outside_a_smaller_tokenizer_is_refused(tmp_path):
    from dllm.models.tiny import write_tiny_checkpoint

    d = write_tiny_checkpoint(tmp_path / "m", "llada", vocab_size=512)
    _edit_config(d, mask_token_id=400)  # a padded embedding row, no token of the tokenizer
    with pytest.raises(CheckpointError, match=r"sets mask_token_id=400, which the tokenizer \(\d+ tokens\) does not have"):
        dllm.load(d)


def test_tokenizer_smaller_than_the_vocabulary_never_decodes_silently(tmp_path):
    """Padded embedding rows load (as in LLaDA-8B); an answer id the tokenizer lacks is an
    error, not text with the token missing."""
    import torch

    from dllm.models.tiny import write_tiny_checkpoint

    model = dllm.load(write_tiny_checkpoint(tmp_path / "m", "llada", vocab_size=512))
    size = len(model.tokenizer)
    assert size < model.model.config.vocab_size
    with torch.no_grad():  # every id the tokenizer knows scores 0; the padded rows win
        model.model.lm_head.weight[:size] = 0
    with pytest.raises(ValueError, match=rf"model generated id\(s\) \[\d+.*does not define \({size} tokens"):
        model.generate("hello", gen_length=8)


def test_cuda_device_without_cuda_is_a_clear_error(tiny_dirs, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"device 'cuda' asked for, but this torch sees no CUDA device.*\(--device cpu\)"):
        dllm.load(tiny_dirs["llada"], device="cuda")
    with pytest.raises(ValueError, match="is not a torch device"):
        dllm.load(tiny_dirs["llada"], device="gpu0")
