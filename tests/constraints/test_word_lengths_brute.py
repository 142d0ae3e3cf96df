"""A token DFA's shortest and longest word against brute force: on a small vocabulary, every token
sequence up to a length is tried (Python's re decides whether its text is a word). The vocabulary
lacks some characters, so a DFA state can be reached without ever ending a word, or end one
without being reachable: neither may count, and a cycle through such a state bounds nothing.
``answer_bound`` (the answer length of a constrained call that set none) is the longest word + 1."""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from dllm.samplers.constraints import compile_regex
from dllm.samplers.constraints.token_dfa import TokenDFA

EOS = 0
SPELLED = (None, b"a", b"b", b"ab", b"c", b"x", b"bca")  # id 0: end-of-text; no "d", "y" or "z" token
WORDS = range(1, len(SPELLED))
UP_TO = 6  # longer than every finite language's longest word below


def _lengths(pattern: str) -> list[int]:
    """The token counts of the words of ``pattern`` over SPELLED, up to UP_TO tokens."""
    return [n for n in range(UP_TO + 1) for seq in itertools.product(WORDS, repeat=n)
            if re.fullmatch(pattern, b"".join(SPELLED[t] for t in seq).decode())]


FINITE = [
    "ab|c",  # "ab" is one token or two: the longest takes two
    "(abc|xa)b",  # branches of different lengths meet before the last token, in both orders below
    "(xa|abc)b",
    "ab|c+d",  # no "d" token: the c-loop is reachable but never ends a word
    "xa|y(bc)*",  # no "y" token: the bc-loop ends words but is never reached
    "(x|yz)a",  # the unreachable "y" state leads into the word's path
    "a(bca|b)?",  # "bca" one token or three
]


@pytest.mark.parametrize("pattern", FINITE)
def test_shortest_and_longest_word_of_a_finite_language_are_brute_forces(pattern):
    dfa = compile_regex(pattern, SPELLED, EOS)
    lengths = _lengths(pattern)
    assert lengths and max(lengths) < UP_TO
    assert dfa.shortest_word() == min(lengths)
    assert dfa.longest_word() == max(lengths)


def _graph_dfa(edges: list[tuple[int, int]], finals: list[int], label: tuple[int, ...]) -> TokenDFA:
    """A DFA given by its state-to-state edges (start 0), its states numbered ``label[s]``: the
    word lengths read only ``succ``, ``start`` and ``final`` (the dead state is the last)."""
    dead = len(label)
    succ = np.zeros((dead + 1, dead + 1), dtype=bool)
    for a, b in edges:
        succ[label[a], label[b]] = True
    final = np.zeros(dead + 1, dtype=bool)
    final[[label[f] for f in finals]] = True
    return TokenDFA(regex="", start=label[0], final=final, table=np.full((dead + 1, 1), dead, dtype=np.int32),
                    token_class=np.zeros(1, dtype=np.int64), succ=succ, dead_class=0)


def test_branches_of_different_lengths_meeting_count_the_longer_under_every_state_numbering():
    """0 -> 1 -> 2 -> 4 and 0 -> 3 -> 4 (4 accepting): the longest word takes 3 tokens, the shortest
    2, whichever branch the topological order finishes last (interegular's numbering of states
    changes between runs, so every numbering is tried)."""
    edges = [(0, 1), (1, 2), (2, 4), (0, 3), (3, 4)]
    for label in itertools.permutations(range(5)):
        dfa = _graph_dfa(edges, [4], label)
        assert (dfa.shortest_word(), dfa.longest_word()) == (2, 3), label


@pytest.mark.parametrize("pattern", ["(ab)+", "a(bc)*", "c*x", "ab|(ca)+"])
def test_a_language_with_a_loop_has_no_longest_word(pattern):
    dfa = compile_regex(pattern, SPELLED, EOS)
    assert max(_lengths(pattern)) >= UP_TO - 1  # words as long as the sweep goes
    assert dfa.longest_word() is None


@pytest.mark.parametrize("pattern", ["d", "y(ab)*", "ad|zc"])
def test_a_language_no_token_can_write_has_neither(pattern):
    dfa = compile_regex(pattern, SPELLED, EOS)
    assert _lengths(pattern) == []
    assert dfa.shortest_word() is None and dfa.longest_word() is None
