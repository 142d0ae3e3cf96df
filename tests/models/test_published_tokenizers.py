"""Dream and Fast-dLLM v2 publish their tokenizer as ``vocab.json`` + ``merges.txt`` (no
``tokenizer.json``): Dream-org/Dream-v0-Instruct-7B with ``tokenizer_class: "DreamTokenizer"`` and
an ``auto_map`` to its remote ``tokenization_dream.py``, Efficient-Large-Model/Fast_dLLM_v2_7B with
``tokenizer_class: "Qwen2Tokenizer"``. Both split text with Qwen2's byte-level rules, so dllm reads
them with transformers' own Qwen2 tokenizer, never the remote code.

The tiny checkpoints below keep the published config.json and tokenizer_config.json keys with
sizes and token ids shrunk; the expected ids come from a ``tokenizers`` BPE built from the same
vocabulary and rules, independently of transformers and dllm.
"""
from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

import dllm
from dllm.models import CheckpointError, load_tokenizer
from dllm.models.hub import HUB_FILES, missing_files
from dllm.models.tiny import write_tiny_checkpoint
from dllm.models.visibility import KeyVisibility
from tests.models.test_parity import reference_dream

# Qwen2's pre-tokenisation (PRETOKENIZE_REGEX of Qwen2Tokenizer and of Dream's tokenization_dream.py)
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
CORPUS = ["the quick brown fox jumps over the lazy dog", "a masked diffusion language model",
          "numbers 12345 and 2026, café déjà vu", "line one\nline two\n\n  indented"] * 4
CHATML = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SIZES = dict(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, mlp_hidden=128, vocab_size=320)
# A remote-code tokenizer file that fails if anything imports it.
REMOTE_CODE = "raise RuntimeError('remote code was executed')\n"


def _qwen2_bpe(specials: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=290, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS, trainer=trainer)
    tok.add_special_tokens(specials)  # after the BPE vocabulary, as Qwen2's added tokens are
    return tok


def _write_vocab_merges(out, tok: Tokenizer, specials: list[str], tokenizer_config: dict) -> dict[str, int]:
    """vocab.json + merges.txt + tokenizer_config.json (with added_tokens_decoder) as published."""
    tok.model.save(str(out))
    ids = {s: tok.token_to_id(s) for s in specials}
    decoder = {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                        "single_word": False, "special": True} for s, i in ids.items()}
    (out / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": decoder, **tokenizer_config}))
    (out / "added_tokens.json").write_text(json.dumps(ids))
    (out / "tokenizer.json").unlink()
    return ids


DREAM_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|beginoftext|>", "<|mask|>"]


def _dream_dir(root):
    """Dream-v0-Instruct-7B's files (config.json, tokenizer_config.json as published), shrunk."""
    out = write_tiny_checkpoint(root, "dream", seed=21, **SIZES)
    tok = _qwen2_bpe(DREAM_SPECIALS)
    ids = _write_vocab_merges(out, tok, DREAM_SPECIALS, {
        "add_bos_token": False, "add_prefix_space": False,
        "additional_special_tokens": ["<|beginoftext|>", "<|mask|>"],
        "auto_map": {"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]},
        "bos_token": "<|beginoftext|>", "chat_template": CHATML, "clean_up_tokenization_spaces": False,
        "eos_token": "<|endoftext|>", "errors": "replace", "mask_token": "<|mask|>", "model_max_length": 131072,
        "pad_token": "<|endoftext|>", "split_special_tokens": False, "tokenizer_class": "DreamTokenizer",
        "unk_token": None})
    (out / "tokenization_dream.py").write_text(REMOTE_CODE)
    eot, mask = ids["<|endoftext|>"], ids["<|mask|>"]
    config = {  # Dream-org/Dream-v0-Instruct-7B config.json, sizes and ids shrunk
        "architectures": ["DreamModel"], "attention_dropout": 0.0,
        "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
        "bos_token_id": eot, "eos_token_id": eot, "hidden_act": "silu", "hidden_size": 64,
        "initializer_range": 0.02, "intermediate_size": 128, "mask_token_id": mask,
        "max_position_embeddings": 1024, "max_window_layers": 28, "model_type": "Dream",
        "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "pad_token_id": eot,
        "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": None,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.46.2",
        "use_cache": True, "use_mrope": False, "use_sliding_window": False, "vocab_size": SIZES["vocab_size"]}
    (out / "config.json").write_text(json.dumps(config))
    return out, tok


FAST_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "|<MASK>|"]


def _fast_dllm_dir(root):
    """Fast_dLLM_v2_7B's files: Qwen2Tokenizer, the mask token only an additional special token,
    the chat template in chat_template.jinja."""
    out = write_tiny_checkpoint(root, "fast_dllm_v2", seed=22, **SIZES)
    tok = _qwen2_bpe(FAST_SPECIALS)
    ids = _write_vocab_merges(out, tok, FAST_SPECIALS, {
        "additional_special_tokens": ["|<MASK>|"], "bos_token": None, "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>", "errors": "replace", "extra_special_tokens": {}, "model_max_length": 131072,
        "pad_token": "<|endoftext|>", "padding_side": "right", "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer", "unk_token": None})
    (out / "chat_template.jinja").write_text(CHATML)
    config = json.loads((out / "config.json").read_text())
    config.update(eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|im_end|>"], bos_token_id=ids["<|endoftext|>"],
                  mask_token_id=ids["|<MASK>|"])
    (out / "config.json").write_text(json.dumps(config))
    return out, tok


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    root = tmp_path_factory.mktemp("published_tokenizers")
    return {"dream": _dream_dir(root / "dream"), "fast_dllm_v2": _fast_dllm_dir(root / "fast")}


TEXTS = ["the quick brown fox", "numbers 12345 and 2026, café", "line one\nline two\n\n  indented  ",
         "<|im_start|>user\nhi<|im_end|>\n", "a  lazy   dog's tail"]


@pytest.mark.parametrize("family", ["dream", "fast_dllm_v2"])
def test_vocab_and_merges_tokenize_as_the_published_rules(published, family):
    path, reference = published[family]
    tokenizer = load_tokenizer(path)
    for text in TEXTS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert ids == reference.encode(text).ids, text
        assert tokenizer.decode(ids) == text
    assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                         tokenize=False) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_dream_loads_and_generates_without_remote_code(published):
    path, reference = published["dream"]
    model = dllm.load(path, device="cpu", dtype="float32")
    assert model.tokenizer.mask_token_id == model.model.mask_token_id == reference.token_to_id("<|mask|>")
    assert model.tokenizer.eos_token_id == reference.token_to_id("<|endoftext|>")
    ids = torch.tensor([reference.encode("the quick brown fox").ids])
    pos = torch.arange(ids.shape[1])[None]
    valid = torch.ones_like(ids, dtype=torch.bool)
    ours = model.model(ids, pos, KeyVisibility(valid=valid))
    theirs = reference_dream(path, ids, pos, valid)
    assert ((ours - theirs).norm() / theirs.norm()) < 1e-5
    out = model.generate(["the quick brown fox"], gen_length=8, steps=8)
    assert len(out.token_ids[0]) == 8


def test_fast_dllm_v2_reads_its_mask_token_from_config(published):
    path, reference = published["fast_dllm_v2"]
    model = dllm.load(path, device="cpu", dtype="float32")
    assert model.model.mask_token_id == reference.token_to_id("|<MASK>|")
    assert model.model.config.eos_token_ids == (reference.token_to_id("<|im_end|>"),)


def test_hub_fetches_and_accepts_vocab_and_merges(published):
    from huggingface_hub.utils import filter_repo_objects

    path, _ = published["dream"]
    assert missing_files(path) == []
    repo = [p.name for p in path.iterdir()]
    fetched = set(filter_repo_objects(repo, allow_patterns=HUB_FILES))
    assert {"vocab.json", "merges.txt", "tokenizer_config.json", "added_tokens.json"} <= fetched
    assert "tokenization_dream.py" not in fetched


def test_vocab_and_merges_of_an_unknown_tokenizer_class_are_refused(published, tmp_path):
    import shutil

    path = shutil.copytree(published["dream"][0], tmp_path / "m")
    raw = json.loads((path / "tokenizer_config.json").read_text())
    raw["tokenizer_class"] = "GPT2Tokenizer"
    (path / "tokenizer_config.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match=r"GPT2Tokenizer.*tokenizer\.json"):
        load_tokenizer(path)


def test_a_checkpoint_without_any_tokenizer_names_the_files_read(published, tmp_path):
    import shutil

    path = shutil.copytree(published["dream"][0], tmp_path / "m")
    (path / "merges.txt").unlink()
    with pytest.raises(CheckpointError, match=r"no tokenizer\.json, nor vocab\.json and merges\.txt"):
        load_tokenizer(path)
