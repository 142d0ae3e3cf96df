"""SDAR, LLaDA2.x and LLaDA-MoE checkpoints: family detection, errors that name the fault, and
``dllm.load`` + ``generate`` with the default policy."""
from __future__ import annotations

import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

import dllm
from dllm.models import CheckpointError, load_model
from dllm.models.tiny import write_tiny_checkpoint

FAMILIES = ("sdar", "llada2_moe", "llada_moe")


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("family_loading")
    out = {f: write_tiny_checkpoint(root / f, f, seed=3) for f in FAMILIES}
    out["llada"] = write_tiny_checkpoint(root / "llada", "llada", seed=4)
    return out


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _edit_config(d, **changes):
    raw = json.loads((d / "config.json").read_text())
    raw.update(changes)
    (d / "config.json").write_text(json.dumps(raw))


def test_model_type_llada_is_told_apart_by_architectures(dirs):
    assert load_model(dirs["llada"]).config.family == "llada"
    moe = load_model(dirs["llada_moe"])
    assert moe.config.family == "llada_moe"
    assert json.loads((dirs["llada_moe"] / "config.json").read_text())["model_type"] == "llada"


def test_renamed_lladamoe_model_type_loads(dirs, tmp_path):
    d = _copy(dirs["llada_moe"], tmp_path / "m")
    _edit_config(d, model_type="lladamoe")
    assert load_model(d).config.family == "llada_moe"


def test_unknown_architecture_under_a_shared_model_type_is_refused(dirs, tmp_path):
    d = _copy(dirs["llada_moe"], tmp_path / "m")
    _edit_config(d, architectures=["SomethingElseLM"])
    with pytest.raises(CheckpointError, match=r"architectures \['SomethingElseLM'\].*'llada_moe': \['LLaDAMoEModelLM'"):
        load_model(d)


@pytest.mark.parametrize("config_of,weights_of,found", [
    ("llada", "llada_moe", r"llada_moe \(found model\.layers\.\d+\.mlp\.experts\.\d+\.gate_proj\.weight\)"),
    ("llada_moe", "llada", r"llada \(found model\.transformer\.wte\.weight\)"),
])
def test_config_of_one_layout_with_weights_of_the_other_is_refused(dirs, tmp_path, config_of, weights_of, found):
    """LLaDA-8B's config over LLaDA-MoE's weights (and the reverse) names the layout found."""
    d = _copy(dirs[weights_of], tmp_path / "m")
    shutil.copy(dirs[config_of] / "config.json", d / "config.json")
    with pytest.raises(CheckpointError, match=rf"describes a {config_of} checkpoint, but the weights are in the {found} layout"):
        load_model(d)


@pytest.mark.parametrize("family,tensor", [
    ("llada2_moe", "model.layers.1.mlp.experts.2.up_proj.weight"),
    ("llada2_moe", "model.layers.1.mlp.gate.expert_bias"),
    ("llada2_moe", "model.layers.0.attention.query_key_value.weight"),
    ("llada_moe", "model.layers.0.shared_expert.down_proj.weight"),
    ("sdar", "model.layers.1.self_attn.k_norm.weight"),
])
def test_a_missing_tensor_is_named(dirs, tmp_path, family, tensor):
    d = _copy(dirs[family], tmp_path / "m")
    tensors = load_file(str(d / "model.safetensors"))
    del tensors[tensor]
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError, match=rf"missing tensors: \['{tensor}'\]"):
        load_model(d)


def test_a_misshaped_fused_projection_is_named_with_both_shapes(dirs, tmp_path):
    d = _copy(dirs["llada2_moe"], tmp_path / "m")
    tensors = load_file(str(d / "model.safetensors"))
    name = "model.layers.1.attention.query_key_value.weight"
    rows = tensors[name].shape[0]
    tensors[name] = tensors[name][:-8].clone()
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError, match=rf"{name}: checkpoint \[{rows - 8}, 64\] != config \[{rows}, 64\]"):
        load_model(d)


@pytest.mark.parametrize("family,key,value,match", [
    ("llada_moe", "moe_router_enable_expert_bias", True, "adds that bias to the routing weights"),
    ("llada_moe", "moe_layer_freq", [1], "moe_layer_freq must list one 0 .* per layer"),
    ("llada2_moe", "rotary_dim", 4, "rotary_dim=4 disagrees with head_dim"),
    ("llada2_moe", "norm_head", True, "norm_head=True is not supported"),
    ("llada2_moe", "topk_group", 3, "topk_group=3 exceeds n_group=2"),
    ("sdar", "use_sliding_window", True, "use_sliding_window / rope_scaling are not supported"),
])
def test_unsupported_or_inconsistent_config_is_refused(dirs, tmp_path, family, key, value, match):
    d = _copy(dirs[family], tmp_path / "m")
    _edit_config(d, **{key: value})
    with pytest.raises(CheckpointError, match=match):
        load_model(d)


def test_sdar_defaults_when_the_config_lacks_block_size_and_mask_id(dirs, tmp_path):
    """Earlier copies of SDAR's config.json carry neither; the official values apply."""
    d = _copy(dirs["sdar"], tmp_path / "m")
    raw = json.loads((d / "config.json").read_text())
    del raw["block_size"], raw["mask_token_id"]
    raw["vocab_size"] = 151936
    (d / "config.json").write_text(json.dumps(raw))
    from dllm.models.registry import family_of

    cfg = family_of(raw).parse_config(raw)
    assert (cfg.block_size, cfg.mask_token_id) == (4, 151669)


@pytest.mark.parametrize("family,template", [
    ("sdar", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"),
    ("llada2_moe", "<role>HUMAN</role>hi<|role_end|><role>ASSISTANT</role>"),
    ("llada_moe", "<role>HUMAN</role>hi<|role_end|><role>ASSISTANT</role>"),
])
def test_load_and_generate_with_the_default_policy(dirs, family, template):
    model = dllm.load(dirs[family])
    chat = model.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                               tokenize=False)
    assert chat == template
    assert model.tokenizer.convert_ids_to_tokens(model.model.mask_token_id) in ("<|MASK|>", "<|mask|>")
    out = model.generate(["hello", "a masked diffusion model"], gen_length=32)
    assert [len(ids) for ids in out.token_ids] == [32, 32]
    assert all(model.model.mask_token_id not in ids for ids in out.token_ids)


@pytest.mark.parametrize("family", FAMILIES)
def test_save_checkpoint_writes_the_original_layout_back(dirs, tmp_path, family):
    """A loaded model saved by dllm.train.save is the same checkpoint again: fused q/k/v and
    per-expert tensors rebuilt under their original names."""
    import torch

    from dllm.train.save import save_checkpoint

    raw = json.loads((dirs[family] / "config.json").read_text())
    save_checkpoint(load_model(dirs[family]), raw, tmp_path)
    original, saved = load_file(str(dirs[family] / "model.safetensors")), load_file(str(tmp_path / "model.safetensors"))
    assert original.keys() == saved.keys()
    assert all(torch.equal(original[k], saved[k]) for k in original)


def test_bfloat16_load_keeps_the_routing_bias_in_float32(dirs):
    """Expert choice compares biased scores; a bf16 bias would move ties between experts."""
    import torch

    model = load_model(dirs["llada2_moe"], dtype="bfloat16")
    moe = model.layers[1].mlp
    assert moe.expert_bias.dtype == torch.float32 and moe.gate_proj.dtype == torch.bfloat16


@pytest.mark.parametrize("family,tie_key,head", [
    ("sdar", "tie_word_embeddings", "lm_head.weight"),  # SDAR-1.7B / 4B: Qwen3 with tied embeddings
    ("llada", "weight_tying", "model.transformer.ff_out.weight"),
])
def test_a_tied_checkpoint_that_also_stores_its_head_loads_with_the_embedding_as_head(dirs, tmp_path, family,
                                                                                       tie_key, head):
    """With tied embeddings transformers makes the LM head the embedding whatever head tensor the file
    also holds (some exports write both): the model is the one without that tensor, not a refusal."""
    import torch

    from dllm.models.visibility import KeyVisibility

    tied = _copy(dirs[family], tmp_path / "tied")
    _edit_config(tied, **{tie_key: True})
    without = _copy(tied, tmp_path / "without")
    tensors = load_file(str(without / "model.safetensors"))
    del tensors[head]
    save_file(tensors, str(without / "model.safetensors"))
    ids = torch.randint(0, 250, (1, 8), generator=torch.Generator().manual_seed(0))
    pos, vis = torch.arange(8)[None], KeyVisibility(spans=((0, 4, 4), (4, 8, 8)) if family == "sdar" else None)
    with torch.no_grad():
        logits = load_model(tied)(ids, pos, vis)
        expected = load_model(without)(ids, pos, vis)
    assert torch.equal(logits, expected)
