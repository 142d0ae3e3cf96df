"""A context-free grammar compiled once against a vocabulary, in the place of a token DFA (a
grammar whose language is regular becomes one: ``compile_grammar``).

``TokenGrammar`` answers the canvas questions of canvas.py (``canvas_sets``, ``allowed_classes``)
with the Earley parse of cfg_canvas.py, so rows.py treats grammar rows and regular rows alike.
Its token classes are the token ids themselves (class ``V``: never allowed). A row resumed
after answer tokens keeps them as a prefix the canvas check reads first: its "state" is that
prefix itself (a tuple of token ids, ``()`` at the start), held by the row and by nothing shared,
so a long-running server's cached grammar does not grow with the rows it has served.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from dllm.samplers.constraints.canvas import HOLE
from dllm.samplers.constraints.cfg_canvas import Parsed, parse_canvas
from dllm.samplers.constraints.grammar import Grammar, grammar_regex, parse_grammar
from dllm.samplers.constraints.lexer import TokenLexer, build_lexer
from dllm.samplers.constraints.token_dfa import TokenDFA, compile_regex


# answer tokens a recursive grammar may span: its check is an Earley parse, cubic in the positions
# (about 1.5 s to check and 10 s to mask 48 all-hole positions of the bundled vocabulary, pure Python)
MAX_GRAMMAR_TOKENS = 64
# items of a chart a row keeps for the next canvas's parse to resume (about 20 MB traced): a larger
# chart is let go once its canvas is answered, so a batch of long grammar rows holds no chart of
# hundreds of MB each between steps (48 all-hole positions of a JSON-like grammar: 82k items)
HELD_CHART_ITEMS = 64_000


@dataclass(slots=True)
class GrammarSets:
    """A canvas (kinds) read after the prefix ``prefix``; parsed once, when first asked, resuming
    the chart of ``held`` (an earlier canvas's parse, whose chart it takes over) where it has one."""

    grammar: "TokenGrammar"
    kinds: np.ndarray  # (L,) token id, HOLE or EOS; the prefix's tokens first
    start: int  # positions before it are the prefix
    limit: int  # in kinds' positions
    held: Parsed | None = None
    _parsed: Parsed | None = None

    def parsed(self, chart: bool = False) -> Parsed:
        """The canvas's parse (``chart``: with its chart, parsed again if a later one took it over)."""
        if self._parsed is None or (chart and self._parsed.parse is None):
            g = self.grammar
            self._parsed = parse_canvas(g.grammar, g.lexer, self.kinds, self.kinds, self.limit, held=self.held)
            self.held = None
        return self._parsed

    def release_large_chart(self) -> None:
        """Let this canvas's chart go when it is past ``HELD_CHART_ITEMS`` (the next canvas then
        parses afresh): called once the canvas's answer has been read from it."""
        if self._parsed is not None and self._parsed.chart_items() > HELD_CHART_ITEMS:
            self._parsed.parse = None

    def completable(self, state: tuple[int, ...] | None = None) -> bool:
        answer = self.parsed().completable
        self.release_large_chart()
        return answer


@dataclass(eq=False)
class TokenGrammar:
    """A grammar's language over a vocabulary's token ids (end-of-text excluded)."""

    grammar: Grammar
    lexer: TokenLexer
    vocab_size: int
    start = ()  # the state before any answer token: the empty prefix

    @property
    def regex(self) -> str:
        """How messages name the constraint."""
        return "grammar " + " ".join(self.grammar.text.split())

    @functools.cached_property
    def token_class(self) -> np.ndarray:
        return np.arange(self.vocab_size, dtype=np.int64)

    @property
    def dead_class(self) -> int:
        return self.vocab_size

    def run(self, state: tuple[int, ...], tokens: list[int]) -> tuple[int, ...]:
        """The state after answer ``tokens``: the prefix ``state`` extended by them."""
        return state + tuple(int(t) for t in tokens)

    def canvas_sets(self, kinds: np.ndarray, state: tuple[int, ...], limit: int | None = None,
                    held: tuple[np.ndarray, GrammarSets] | None = None) -> GrammarSets:
        """The sets of canvas ``kinds`` after prefix ``state``; ``held``: (kinds, sets) of an
        earlier canvas of this row (canvas.canvas_sets' form), whose chart the parse resumes."""
        prefix = np.array(state, dtype=np.int64)
        full = np.concatenate([prefix, kinds])
        return GrammarSets(self, full, len(prefix), len(full) if limit is None else len(prefix) + limit,
                           None if held is None else held[1]._parsed)

    def allowed_classes(self, sets: GrammarSets, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(K, V) the tokens each hole at ``positions`` may take, (K,) whether end-of-text may."""
        answer = sets.parsed(chart=True).allowed(np.asarray(positions) + sets.start, self.vocab_size)
        sets.release_large_chart()
        return answer

    def shortest_word(self, cap: int = 1024) -> int | None:
        """The fewest tokens of a word (None: none within ``cap`` tokens): completability of
        all-hole canvases, doubling then halving."""
        def fits(n: int) -> bool:
            kinds = np.full(n, HOLE, dtype=np.int64)
            return self.canvas_sets(kinds, self.start, n).completable()

        if fits(0):
            return 0
        high = 1
        while not fits(high):
            if high >= cap:
                return None
            high = min(2 * high, cap)
        low = high // 2  # does not fit
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (low, mid) if fits(mid) else (mid, high)
        return high


def compile_grammar(text: str, spelled: tuple[bytes | None, ...], eos_id: int) -> TokenGrammar | TokenDFA:
    """A grammar against a vocabulary: a token DFA when its language is regular in a way
    ``grammar_regex`` sees (no recursion but Lark's ``*`` / ``+`` loops), else a TokenGrammar."""
    grammar = parse_grammar(text)
    regex = grammar_regex(grammar)
    if regex is not None:
        return compile_regex(regex, spelled, eos_id)
    return TokenGrammar(grammar=grammar, lexer=build_lexer(grammar, spelled, eos_id), vocab_size=len(spelled))


@functools.lru_cache(maxsize=16)
def cached_grammar(text: str, spelled: tuple[bytes | None, ...], eos_id: int) -> TokenGrammar | TokenDFA:
    """``compile_grammar`` once per (grammar, vocabulary)."""
    return compile_grammar(text, spelled, eos_id)

