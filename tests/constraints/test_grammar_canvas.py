"""The context-free canvas check against brute force: on tiny vocabularies, every canvas of holes,
tokens and end-of-text is completable exactly when some filling of its holes is w + end-of-text*
(w ending within the limit) with w's text a sentence of the grammar (Lark's Earley parser
decides), and each hole allows exactly the values some such filling puts there. Tokens span
several terminals ("(1", "1)", '":'), whitespace is %ignore'd, rules are recursive and nullable."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from dllm.samplers.constraints.canvas import EOS as EOS_KIND
from dllm.samplers.constraints.canvas import HOLE
from dllm.samplers.constraints.cfg_canvas import allowed_tokens, completable
from dllm.samplers.constraints.grammar import parse_grammar
from dllm.samplers.constraints.lexer import build_lexer
from tests.constraints.brute_fillings import lark_verdicts

lark = pytest.importorskip("lark")

EOS, MASK = 0, 1
ARITHMETIC = r"""
start: expr
expr: term | expr "+" term
term: NUM | "(" expr ")"
NUM: /[0-9]+/
%ignore " "
"""
ARITHMETIC_VOCAB = (None, None, b"(", b")", b"1", b"+", b"(1", b"1)", b"))", b"+1", b" ", b"12", None)
ARITHMETIC_VALUES = [MASK, EOS, 2, 3, 4, 5, 9, 8, 10]
JSONISH = r"""
start: value
value: list | NAME
list: "[" items? "]"
items: value ("," value)*
NAME: /"[a-b]+"/
"""
JSONISH_VOCAB = (None, None, b"[", b"]", b'"a', b'a"', b'"', b",", b"],", b'["', b'",', b"[]", b"b", None)
JSONISH_VALUES = [MASK, EOS, 2, 3, 4, 5, 6, 7, 9, 10]
# a^n b^n with no %ignore: the sentence starts with terminal 0 ("a"), which the parser's augmented
# start rule once shared its id with, so completing a sentence moved "a" on as if read again
# ("ab" then "b" was accepted)
NESTED = r"""
start: "a" start? "b"
"""
NESTED_VOCAB = (None, None, b"a", b"b", b"ab", b"ba", b"bb", None)
NESTED_VALUES = [MASK, EOS, 2, 3, 4, 5, 6]
CASES = {"arithmetic": (ARITHMETIC, ARITHMETIC_VOCAB, ARITHMETIC_VALUES),
         "jsonish": (JSONISH, JSONISH_VOCAB, JSONISH_VALUES),
         "nested": (NESTED, NESTED_VOCAB, NESTED_VALUES)}


def _fillings(canvas: list[int], limit: int, vocab, parses) -> list[list[int]]:
    """Every filling of the canvas's holes that is w + eos* with w within ``limit`` a sentence."""
    words = [t for t, text in enumerate(vocab) if text]
    holes = [i for i, t in enumerate(canvas) if t == MASK]
    found = []
    for values in itertools.product(words + [EOS], repeat=len(holes)):
        filled = list(canvas)
        for i, v in zip(holes, values):
            filled[i] = v
        end = filled.index(EOS) if EOS in filled else len(filled)
        if end > limit or any(t != EOS for t in filled[end:]):
            continue
        if parses(b"".join(vocab[t] for t in filled[:end]).decode()):
            found.append(filled)
    return found


@pytest.mark.parametrize("case", sorted(CASES))
def test_completable_and_allowed_values_match_brute_force(case):
    text, vocab, values = CASES[case]
    grammar = parse_grammar(text)
    lexer = build_lexer(grammar, vocab, EOS)
    parses = lark_verdicts(text)

    checked = completables = 0
    for length in range(1, 4):
        for canvas in itertools.product(values, repeat=length):
            for limit in (length, length - 1):
                fillings = _fillings(list(canvas), limit, vocab, parses)
                tokens = np.array(canvas)
                kinds = np.where(tokens == MASK, HOLE, np.where(tokens == EOS, EOS_KIND, tokens))
                assert completable(grammar, lexer, kinds, tokens, limit) == bool(fillings), (canvas, limit)
                completables += bool(fillings)
                holes = np.flatnonzero(tokens == MASK)
                if not fillings or len(holes) == 0:
                    continue
                allowed, eos = allowed_tokens(grammar, lexer, kinds, tokens, limit, holes, len(vocab))
                for k, pos in enumerate(holes):
                    got = set(np.flatnonzero(allowed[k]).tolist()) | ({EOS} if eos[k] else set())
                    assert got == {f[pos] for f in fillings}, (canvas, limit, pos)
                    checked += 1
    assert checked > 50 and completables > 50  # the oracle saw holes and sentences to compare


def test_a_bad_grammar_is_refused_with_what_to_change():
    with pytest.raises(ValueError, match="does not parse as Lark EBNF"):
        parse_grammar("start: (")
    with pytest.raises(ValueError, match="'::=' is GBNF / BNF, which dllm does not read"):  # vLLM's guided_grammar
        parse_grammar('root ::= "yes" | "no"')
    with pytest.raises(ValueError, match="rule must be named 'start'"):
        parse_grammar('root: "yes" | "no"')
    with pytest.raises(ValueError, match="lookbehind"):
        parse_grammar('%import common.ESCAPED_STRING\nstart: ESCAPED_STRING')
    with pytest.raises(ValueError, match="zero-width"):  # Lark's own check, before ours
        parse_grammar("start: A\nA: /x*/")


def test_a_regular_grammar_takes_the_dfa_path_and_agrees_with_the_parse():
    from dllm.samplers.constraints.canvas import allowed_classes, canvas_sets, position_kinds
    from dllm.samplers.constraints.token_dfa import TokenDFA
    from dllm.samplers.constraints.token_grammar import TokenGrammar, compile_grammar

    text = 'start: NAME ("," NAME)*\nNAME: /[a-b]+/\n%ignore " "\n'
    vocab = (None, None, b"a", b"b", b",", b"a,", b" ", b",b", b"ab ", None)
    dfa = compile_grammar(text, vocab, EOS)
    assert isinstance(dfa, TokenDFA)  # Lark's ("," NAME)* loop is seen as a loop, not recursion
    grammar = parse_grammar(text)
    parse = TokenGrammar(grammar=grammar, lexer=build_lexer(grammar, vocab, EOS), vocab_size=len(vocab))
    assert isinstance(compile_grammar('start: "(" start? ")"', vocab, EOS), TokenGrammar)  # recursive
    agreed = 0
    for length in range(1, 4):
        for canvas in itertools.product([MASK, EOS, 2, 3, 4, 5, 6, 7, 8], repeat=length):
            tokens = np.array(canvas)
            answers = []
            for language in (dfa, parse):
                kinds = position_kinds(language, tokens, MASK, np.array([EOS]), None)
                sets = canvas_sets(language, kinds, language.start)
                holes = np.flatnonzero(tokens == MASK)
                allowed = None
                if sets.completable(language.start) and len(holes):
                    classes, eos = allowed_classes(language, sets, holes)
                    allowed = (classes[:, language.token_class[: len(vocab)]].tolist(), eos.tolist())
                answers.append((sets.completable(language.start), allowed))
            assert answers[0] == answers[1], canvas
            agreed += answers[0][1] is not None
    assert agreed > 50
