"""Tokenizer from a checkpoint directory without remote code.

``AutoTokenizer`` reads ``auto_map`` and may prompt for remote code, so the fast tokenizer is
built from ``tokenizer.json`` directly, with special tokens and chat template from
``tokenizer_config.json``. Dream and Fast-dLLM v2 publish no ``tokenizer.json``, only
``vocab.json`` + ``merges.txt`` with Qwen2's byte-level rules (Dream's ``DreamTokenizer`` is
remote code copying them): those are read by transformers' own Qwen2 tokenizer.
"""
from __future__ import annotations

from pathlib import Path

from transformers import PreTrainedTokenizerFast

from dllm.models.config import ArchConfig
from dllm.models.loading import CheckpointError, read_json_object

_SPECIAL_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token", "mask_token")
# tokenizer_class values of vocab.json + merges.txt tokenizers that split text by Qwen2's rules
# (Dream-v0's remote DreamTokenizer has Qwen2's regex, NFC and byte-level BPE; Fast-dLLM v2 says Qwen2).
QWEN2_BPE_CLASSES = ("Qwen2Tokenizer", "Qwen2TokenizerFast", "DreamTokenizer")


def _token_text(value) -> str | None:
    if isinstance(value, dict):  # AddedToken serialised as a dict
        return value.get("content")
    return value


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """The checkpoint's tokenizer from ``tokenizer.json``, else from Qwen2-style ``vocab.json`` +
    ``merges.txt``; never its remote code."""
    path = Path(path)
    tokenizer_file = path / "tokenizer.json"
    config_file = path / "tokenizer_config.json"
    tok_cfg = read_json_object(config_file) if config_file.is_file() else {}
    if not tokenizer_file.is_file():
        return _with_chat_template(_qwen2_bpe_tokenizer(path, tok_cfg), tok_cfg, path)
    special = {k: _token_text(tok_cfg[k]) for k in _SPECIAL_KEYS if tok_cfg.get(k) is not None}
    try:
        tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_file), **special)
    except Exception as err:  # noqa: BLE001  the tokenizers library raises a bare Exception
        raise CheckpointError(
            f"{tokenizer_file} cannot be read as a fast tokenizer ({err}); replace it with the "
            "checkpoint's original tokenizer.json"
        ) from err
    return _with_chat_template(tokenizer, tok_cfg, path)


def _with_chat_template(tokenizer: PreTrainedTokenizerFast, tok_cfg: dict, path: Path) -> PreTrainedTokenizerFast:
    """The chat template of tokenizer_config.json, else of chat_template.jinja, set on the tokenizer."""
    template = tok_cfg.get("chat_template")
    template_file = path / "chat_template.jinja"
    if template is None and template_file.is_file():
        template = template_file.read_text()
    if template is not None:
        tokenizer.chat_template = template
    return tokenizer


def _qwen2_bpe_tokenizer(path: Path, tok_cfg: dict) -> PreTrainedTokenizerFast:
    """A checkpoint without tokenizer.json: its vocab.json + merges.txt read by transformers' Qwen2
    tokenizer (special and added tokens from tokenizer_config.json), when its class splits by those rules."""
    if not ((path / "vocab.json").is_file() and (path / "merges.txt").is_file()):
        raise CheckpointError(
            f"no tokenizer.json, nor vocab.json and merges.txt, in {path}; restore the checkpoint's tokenizer "
            "files (dllm reads tokenizer.json, or a Qwen2-style vocab.json + merges.txt)"
        )
    tokenizer_class = tok_cfg.get("tokenizer_class")
    if tokenizer_class not in QWEN2_BPE_CLASSES:
        raise CheckpointError(
            f"{path} has vocab.json + merges.txt of tokenizer_class {tokenizer_class!r} and no tokenizer.json; dllm "
            f"reads those files only for {list(QWEN2_BPE_CLASSES)} (Qwen2's rules). Write tokenizer.json with "
            "transformers: AutoTokenizer.from_pretrained(path).save_pretrained(path)"
        )
    from transformers import Qwen2TokenizerFast

    try:  # a concrete class: auto_map (remote code) is not read
        return Qwen2TokenizerFast.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError, TypeError) as err:
        raise CheckpointError(f"the vocab.json / merges.txt tokenizer in {path} cannot be read ({err}); restore "
                              "the checkpoint's original tokenizer files") from err


def check_tokenizer_fits(tokenizer: PreTrainedTokenizerFast, config: ArchConfig, path: Path) -> None:
    """The tokenizer's ids must be rows of the model, and the model's special ids tokens.

    A tokenizer may be smaller than the model's vocabulary (LLaDA-8B and Dream-7B pad their
    embeddings), never larger: its extra ids would fail inside the embedding.
    """
    size = len(tokenizer)
    if size > config.vocab_size:
        raise CheckpointError(
            f"the tokenizer in {path} has {size} tokens but the model's vocabulary has "
            f"{config.vocab_size} rows, so ids >= {config.vocab_size} cannot be embedded; the "
            "tokenizer does not belong to these weights: use the checkpoint's own tokenizer.json"
        )
    special = [("mask_token_id", config.mask_token_id), ("pad_token_id", config.pad_token_id)]
    special += [("eos_token_id", eos) for eos in config.eos_token_ids]
    for name, token in special:
        if token is not None and token >= size:  # a uniform-state model has no mask token
            raise CheckpointError(
                f"config.json in {path} sets {name}={token}, which the tokenizer ({size} tokens) "
                "does not have; the tokenizer does not belong to these weights: use the "
                "checkpoint's own tokenizer.json"
            )


def check_decodable(ids: list[int], tokenizer: PreTrainedTokenizerFast, vocab_size: int, path: Path) -> None:
    """Refuse to turn ids the tokenizer does not define into text (they would vanish from it)."""
    size = len(tokenizer)
    unknown = sorted({t for t in ids if t >= size})
    if unknown:
        raise ValueError(
            f"the model generated id(s) {unknown[:10]} that the tokenizer in {path} does not define "
            f"({size} tokens, model vocabulary {vocab_size}); their text would be lost. Padded "
            "embedding rows are never predicted by a trained model, so the tokenizer does not "
            "belong to these weights: use the checkpoint's own tokenizer.json"
        )
