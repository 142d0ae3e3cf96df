"""The token DFA is compiled a chunk of tokens at a time, its classes found by hashing columns: the
transitions are those of one whole pass, words are accepted as Python's re accepts them, and a
states x vocabulary table past the old 1 GiB bound (a real 150k vocabulary meets it near 1,800
states: a required call over a few tools) compiles when its class table is small."""
from __future__ import annotations

import random
import re

import numpy as np
import pytest

from dllm.samplers.constraints import token_dfa

REGEX = r'\{"(a|b)+": ?(\d{1,3}|"[a-z]{0,5}")\}'


def _vocabulary(size: int, seed: int = 0) -> tuple[bytes | None, ...]:
    rng = random.Random(seed)
    pieces = [None, "é".encode()[:1], "é".encode()]  # never allowed, a piece of a character, a whole one
    alphabet = 'ab{}":, 0123456789xyz'
    return tuple(pieces + ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))).encode()
                           for _ in range(size - len(pieces))])


def _transitions(dfa: token_dfa.TokenDFA) -> np.ndarray:
    return dfa.table[:, dfa.token_class]  # (S + 1, V): next state of each state and token


def test_chunks_give_the_transitions_of_one_pass(monkeypatch):
    spelled = _vocabulary(3000)
    whole = token_dfa.compile_regex(REGEX, spelled, eos_id=5)
    monkeypatch.setattr(token_dfa, "CHUNK_BYTES", 4 * (whole.num_states) * 7)  # 7 tokens a chunk
    chunked = token_dfa.compile_regex(REGEX, spelled, eos_id=5)
    assert np.array_equal(_transitions(whole), _transitions(chunked))
    assert chunked.table.shape[1] == np.unique(_transitions(chunked), axis=1).shape[1] + (
        0 if (_transitions(chunked) == chunked.num_states - 1).all(0).any() else 1)  # each class once
    assert chunked.token_class[0] == chunked.token_class[1] == chunked.token_class[5] == chunked.dead_class


def test_words_are_accepted_as_re_accepts_them():
    spelled = _vocabulary(3000, seed=1)
    dfa = token_dfa.compile_regex(REGEX, spelled, eos_id=5)
    rng = random.Random(2)
    by_text = {}
    for token, text in enumerate(spelled):
        if text and token != 5 and text != "é".encode()[:1]:
            by_text.setdefault(text.decode(), token)
    words = ['{"ab": 12}', '{"a":"xyz"}', '{"b": 1234}', '{"": 1}', '{"ba":""}', '{"ab": x}']
    for word in words + ["".join(rng.choice('ab{}":, 12xyz') for _ in range(rng.randint(1, 12))) for _ in range(300)]:
        tokens, rest = [], word
        while rest:  # greedy longest-match tokenisation over the vocabulary's texts
            piece = next((rest[:n] for n in (4, 3, 2, 1) if rest[:n] in by_text), None)
            if piece is None:
                break
            tokens.append(by_text[piece])
            rest = rest[len(piece):]
        if rest:
            continue
        accepted = bool(dfa.final[dfa.run(dfa.start, tokens)])
        assert accepted == bool(re.fullmatch(REGEX, word)), word


def test_a_table_past_the_old_bound_compiles_when_its_classes_are_few(monkeypatch):
    """The old compile built the (states x vocabulary) table first and refused it past
    MAX_TABLE_BYTES; the classes table is what is kept, and only it is bounded now."""
    spelled = _vocabulary(20_000, seed=3)
    monkeypatch.setattr(token_dfa, "MAX_TABLE_BYTES", 1 << 20)
    dfa = token_dfa.compile_regex("[ab]{0,199}x", spelled, eos_id=5)
    assert dfa.num_states * len(spelled) * 4 > 1 << 20  # the old dense table: refused before
    assert dfa.table.nbytes <= 1 << 20
    with pytest.raises(token_dfa.TableTooLarge, match="states"):
        token_dfa.compile_regex("[ab]{0,1099}x", spelled, eos_id=5)  # 1,101^2 bytes of successors
