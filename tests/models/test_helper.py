"""dllm.load(..., helper=): any transformers causal LM of the model's tokenizer, loaded as
transformers loads it; a helper of another tokenizer, one that needs remote code, or one that is
not a causal LM is refused with the fault named, before its weights are read."""
from __future__ import annotations

import json

import pytest
import torch

import dllm
from dllm.cli.main import build_parser
from dllm.models.helper import HelperLM, bundled_helpers, tokenizer_mismatch
from dllm.models.bundled import resolve_model_path
from dllm.models.loading import CheckpointError
from dllm.models.tokenizer import load_tokenizer
from tests.tiny_helper import write_tiny_helper


@pytest.fixture(scope="module")
def helper_dir(tiny_dirs, tmp_path_factory):
    return write_tiny_helper(tmp_path_factory.mktemp("helper") / "qwen2", tiny_dirs["dream"], seed=5)


def test_helper_loads_through_transformers(tiny_dirs, helper_dir, capsys):
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    assert hf_logging.is_progress_bar_enabled()
    lm = dllm.load(tiny_dirs["dream"], device="cpu", dtype="float32", helper=helper_dir)
    assert capsys.readouterr().err == ""  # transformers' "Loading weights" bar drew even under dllm -q
    assert hf_logging.is_progress_bar_enabled()  # restored for the caller's own transformers loads
    assert isinstance(lm.model.helper, HelperLM) and lm.model.helper.vocab_size == len(lm.tokenizer)
    assert not any(p is q for p in lm.model.parameters() for q in lm.model.helper.model.parameters())
    reference = AutoModelForCausalLM.from_pretrained(helper_dir, dtype=torch.float32).eval()
    ids = torch.tensor([[5, 17, 42, 9, 3]])
    with torch.no_grad():
        assert torch.equal(lm.model.helper.model(ids).logits, reference(ids).logits)


def _edit_vocab(src, dst, edit):
    """A copy of helper ``src`` whose tokenizer.json vocabulary went through ``edit``."""
    import shutil

    shutil.copytree(src, dst)
    data = json.loads((dst / "tokenizer.json").read_text())
    edit(data["model"]["vocab"])
    (dst / "tokenizer.json").write_text(json.dumps(data))
    return dst


def test_tokenizer_mismatch_is_named(tiny_dirs, helper_dir, tmp_path):
    vocab = json.loads((helper_dir / "tokenizer.json").read_text())["model"]["vocab"]
    a, b = [t for t, i in sorted(vocab.items(), key=lambda kv: kv[1]) if i >= 20][:2]

    def swap(v):
        v[a], v[b] = v[b], v[a]

    swapped = _edit_vocab(helper_dir, tmp_path / "swapped", swap)
    fault = f"token {b!r} is id {vocab[a]} in the helper's tokenizer and id {vocab[b]} in the model's"
    with pytest.raises(ValueError, match=fault):
        dllm.load(tiny_dirs["dream"], device="cpu", helper=swapped)
    # the model's own special tokens (its mask) may be missing from a helper's tokenizer, not its ordinary ones
    model_tok, helper_tok = load_tokenizer(tiny_dirs["dream"]), load_tokenizer(helper_dir)
    helper_tok.add_special_tokens({"additional_special_tokens": ["<|extra|>"]})
    assert tokenizer_mismatch(model_tok, helper_tok) == (f"the helper's token '<|extra|>' (id {len(vocab)}) "
                                                         "is not in the model's tokenizer")
    helper_tok = load_tokenizer(helper_dir)
    model_tok.add_special_tokens({"additional_special_tokens": ["<|extra|>"]})
    assert tokenizer_mismatch(model_tok, helper_tok) is None
    model_tok.add_tokens(["zzqq"])
    assert tokenizer_mismatch(model_tok, helper_tok) == (f"the model's token 'zzqq' (id {len(vocab) + 1}) is not in "
                                                         "the helper's tokenizer (1 ordinary tokens missing)")


def test_remote_code_and_non_causal_helpers_are_refused(tiny_dirs, helper_dir, tmp_path):
    import shutil

    remote = shutil.copytree(helper_dir, tmp_path / "remote")
    config = json.loads((remote / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_x.X"}
    (remote / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="needs remote code"):
        dllm.load(tiny_dirs["dream"], device="cpu", helper=remote)
    with pytest.raises(CheckpointError, match="needs remote code"):
        dllm.load(tiny_dirs["dream"], device="cpu", helper=tiny_dirs["dream"])  # Dream's own: remote code
    with pytest.raises(CheckpointError, match="not a causal LM transformers can load .model_type 'Dream'"):
        dllm.load("dllm-waitingline-dream", device="cpu", helper=resolve_model_path("dllm-waitingline-dream"))
    with pytest.raises(FileNotFoundError, match="bundled helper"):
        dllm.load(tiny_dirs["dream"], device="cpu", helper="no-such-helper")
    with pytest.raises(TypeError, match="helper must be"):
        dllm.load(tiny_dirs["dream"], device="cpu", helper=3)


def test_cli_helper_option(tiny_dirs, helper_dir):
    from dllm.cli.options import load_from_args

    args = build_parser().parse_args(["generate", "--model", str(tiny_dirs["dream"]), "--helper", str(helper_dir),
                                      "--device", "cpu", "hi"])
    assert load_from_args(args).model.helper.path == helper_dir


def test_bundled_helper_matches_every_bundled_model():
    helpers = bundled_helpers()
    if not helpers:
        pytest.skip("no bundled helper")
    for name in ("dllm-waitingline-dream", "dllm-waitingline-llada"):
        lm = dllm.load(name, device="cpu", helper=next(iter(helpers)))
        assert lm.model.helper.vocab_size >= len(lm.tokenizer)
