"""Tokenizer from a checkpoint directory without remote code.

``AutoTokenizer`` reads ``auto_map`` and may prompt for remote code, so the fast tokenizer is
built from ``tokenizer.json`` directly, with special tokens and chat template from
``tokenizer_config.json``.
"""
from __future__ import annotations

from pathlib import Path

from transformers import PreTrainedTokenizerFast

from dllm.models.config import ArchConfig
from dllm.models.loading import CheckpointError, read_json_object

_SPECIAL_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token", "mask_token")


def _token_text(value) -> str | None:
    if isinstance(value, dict):  # AddedToken serialised as a dict
        return value.get("content")
    return value


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    path = Path(path)
    tokenizer_file = path / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise CheckpointError(
            f"no tokenizer.json in {path}; dllm reads the fast tokenizer file "
            "(convert a slow vocab.json/merges.txt tokenizer with `tokenizers` first)"
        )
    config_file = path / "tokenizer_config.json"
    tok_cfg = read_json_object(config_file) if config_file.is_file() else {}
    special = {k: _token_text(tok_cfg[k]) for k in _SPECIAL_KEYS if tok_cfg.get(k) is not None}
    try:
        tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_file), **special)
    except Exception as err:  # noqa: BLE001  the tokenizers library raises a bare Exception
        raise CheckpointError(
            f"{tokenizer_file} cannot be read as a fast tokenizer ({err}); replace it with the "
            "checkpoint's original tokenizer.json"
        ) from err
    template = tok_cfg.get("chat_template")
    template_file = path / "chat_template.jinja"
    if template is None and template_file.is_file():
        template = template_file.read_text()
    if template is not None:
        tokenizer.chat_template = template
    return tokenizer


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
