"""The bytes each token id writes, the alphabet a regular constraint is run over.

A constraint is a regular language over text, checked on the UTF-8 bytes of the answer, so every
token id needs its exact bytes. Byte-level BPE vocabularies (GPT-2, Qwen, the bundled models)
spell bytes as printable characters; SentencePiece-style ones write "▁" for a space and <0xNN> for
raw bytes. Special tokens (and ids past the tokenizer, and the mask id) write nothing a word may
contain: they get None and are never allowed. Any other decoder is refused by name rather than
guessed at.
"""
from __future__ import annotations

import json
import re


def _byte_level_alphabet() -> dict[str, int]:
    """Character -> byte of byte-level BPE: printable Latin-1 bytes stand for themselves, the
    rest (controls, space, 0x7F-0xA0, 0xAD) are shifted to 256, 257, ... in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in printable}
    shifted = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + shifted)] = b
            shifted += 1
    return table


_HEX_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _decoder_kinds(spec: dict | None) -> set[str]:
    if spec is None:
        return set()
    if spec.get("type") == "Sequence":
        return {kind for part in spec.get("decoders", []) for kind in _decoder_kinds(part)}
    return {spec.get("type")}


def token_bytes(tokenizer, vocab_size: int) -> list[bytes | None]:
    """Bytes of every id in [0, vocab_size): None for special tokens, ids the tokenizer does not
    define and added tokens marked special; added plain tokens write their content."""
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    kinds = _decoder_kinds(spec.get("decoder"))
    out: list[bytes | None] = [None] * vocab_size
    added = {t["id"]: t for t in spec.get("added_tokens", [])}
    vocab = tokenizer.backend_tokenizer.get_vocab(with_added_tokens=False)
    if "ByteLevel" in kinds:
        alphabet = _byte_level_alphabet()

        def spell(piece: str) -> bytes:
            return bytes(alphabet[ch] for ch in piece)
    elif "Metaspace" in kinds or "ByteFallback" in kinds or "Replace" in kinds:
        def spell(piece: str) -> bytes:
            hexbyte = _HEX_BYTE.match(piece)
            return bytes([int(hexbyte.group(1), 16)]) if hexbyte else piece.replace("\u2581", " ").encode()
    else:
        raise ValueError(f"structured output needs each token's bytes, and the tokenizer's decoder "
                         f"{sorted(k for k in kinds if k) or 'none'} is neither byte-level BPE nor "
                         "SentencePiece-style; use a checkpoint with a byte-level or SentencePiece tokenizer")
    for piece, token in vocab.items():
        if token < vocab_size and token not in added:
            out[token] = spell(piece)
    for token, entry in added.items():
        if token < vocab_size:
            out[token] = None if entry.get("special") else entry["content"].encode()
    return out
