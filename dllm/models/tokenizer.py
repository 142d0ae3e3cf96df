"""Tokenizer from a checkpoint directory without remote code.

``AutoTokenizer`` reads ``auto_map`` and may prompt for remote code, so the fast tokenizer is
built from ``tokenizer.json`` directly, with special tokens and chat template from
``tokenizer_config.json``.
"""
from __future__ import annotations

import json
from pathlib import Path

from transformers import PreTrainedTokenizerFast

from dllm.models.loading import CheckpointError

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
    tok_cfg = json.loads(config_file.read_text()) if config_file.is_file() else {}
    special = {k: _token_text(tok_cfg[k]) for k in _SPECIAL_KEYS if tok_cfg.get(k) is not None}
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_file), **special)
    template = tok_cfg.get("chat_template")
    template_file = path / "chat_template.jinja"
    if template is None and template_file.is_file():
        template = template_file.read_text()
    if template is not None:
        tokenizer.chat_template = template
    return tokenizer
