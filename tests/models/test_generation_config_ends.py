"""generation_config.json's ``eos_token_id`` ends an answer too. transformers' ``generate`` reads its
end ids there, and so do the official loops (JetAstra/SDAR ``generate.py`` stops at
``GenerationConfig.from_pretrained(model_dir).eos_token_id``); chat checkpoints list the
end-of-turn token there while config.json names another. Efficient-Large-Model/Fast_dLLM_v2_7B, the
file mirrored here with its ids shrunk, has config.json ``eos_token_id`` 151645 (``<|im_end|>``) and
generation_config.json ``[151645, 151643]`` (``<|im_end|>``, ``<|endoftext|>``).
"""
from __future__ import annotations

import json
import shutil

import pytest

import dllm
from dllm.models import CheckpointError, load_model
from dllm.models.tiny import write_tiny_checkpoint


@pytest.fixture(scope="module")
def fast_dllm(tmp_path_factory):
    """A tiny Fast-dLLM v2 checkpoint whose config.json ends at <|im_end|> and whose
    generation_config.json is the published one (ids shrunk)."""
    path = write_tiny_checkpoint(tmp_path_factory.mktemp("gen_config") / "m", "fast_dllm_v2", seed=31)
    tok = json.loads((path / "tokenizer.json").read_text())
    ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
    im_end, endoftext = ids["<|im_end|>"], ids["<|endoftext|>"]
    raw = json.loads((path / "config.json").read_text())
    raw.update(eos_token_id=im_end, pad_token_id=im_end)
    (path / "config.json").write_text(json.dumps(raw))
    (path / "generation_config.json").write_text(json.dumps({
        "bos_token_id": endoftext, "do_sample": True, "eos_token_id": [im_end, endoftext],
        "pad_token_id": endoftext, "repetition_penalty": 1.05, "temperature": 0.7, "top_k": 20, "top_p": 0.8,
        "transformers_version": "4.53.1"}))
    return path, im_end, endoftext


def _copy_with_generation_config(src, dst, **changes):
    shutil.copytree(src, dst)
    raw = json.loads((dst / "generation_config.json").read_text())
    raw.update(changes)
    (dst / "generation_config.json").write_text(json.dumps(raw))
    return dst


def test_generation_config_end_ids_join_the_config_s(fast_dllm):
    path, im_end, endoftext = fast_dllm
    model = load_model(path)
    assert model.eos_token_ids == (im_end, endoftext)  # config.json's first: it fills after the end
    lm = dllm.load(path, device="cpu", dtype="float32")
    assert lm.model.eos_token_ids == (im_end, endoftext)


def test_a_checkpoint_without_generation_config_keeps_config_s_ends(fast_dllm, tmp_path):
    path, im_end, _ = fast_dllm
    copy = shutil.copytree(path, tmp_path / "m")
    (copy / "generation_config.json").unlink()
    assert load_model(copy).eos_token_ids == (im_end,)


@pytest.mark.parametrize("eos, match", [
    (10_000, r"generation_config\.json: eos_token_id 10000 holds \[10000\], which are not token ids of this model"),
    (["end"], r"generation_config\.json: eos_token_id \['end'\] holds \['end'\].*fix eos_token_id in generation_config"),
])
def test_a_bad_end_id_in_generation_config_is_named(fast_dllm, tmp_path, eos, match):
    copy = _copy_with_generation_config(fast_dllm[0], tmp_path / "m", eos_token_id=eos)
    with pytest.raises(CheckpointError, match=match):
        load_model(copy)


def test_a_generation_config_ending_at_the_mask_token_is_refused(fast_dllm, tmp_path):
    mask = json.loads((fast_dllm[0] / "config.json").read_text())["mask_token_id"]
    copy = _copy_with_generation_config(fast_dllm[0], tmp_path / "m", eos_token_id=[fast_dllm[1], mask])
    with pytest.raises(CheckpointError, match=r"generation_config\.json: .* holds the mask token \d+"):
        load_model(copy)
