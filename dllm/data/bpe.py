"""Small byte-level BPE tokenizers saved as ordinary checkpoint tokenizer files."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers


def train_bpe(texts: Iterable[str], *, vocab_size: int, special_tokens: list[str]) -> Tokenizer:
    """Byte-level BPE (GPT-2 pre-tokenisation, exact decode) with special tokens first."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def save_tokenizer_dir(
    tokenizer: Tokenizer, out_dir: Path, *, special: dict[str, str], chat_template: str
) -> None:
    """Write tokenizer.json + tokenizer_config.json (special tokens and chat template)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": False,
        "add_eos_token": False,
        "chat_template": chat_template,
        **special,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
