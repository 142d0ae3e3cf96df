"""A context-free grammar in Lark's EBNF, read by ``lark`` into plain rules over terminals, each
terminal a regular expression that interegular compiles.

Lark does the parsing and the EBNF expansion (``?``, ``*``, ``+``, ``[...]``, templates,
``%import common.X``); this module keeps what the canvas check needs: the start symbol, the rules
(``lhs -> rhs`` with nonterminals as ints >= 0 and terminals as ints < 0), each terminal's regex
and the ``%ignore``d terminals. The language is the grammar's with terminals read without a
lexer's longest-match rule: any split of the text into terminals that the rules accept (as Lark's
Earley parser with ``lexer="dynamic_complete"`` reads it).
"""
from __future__ import annotations

from dataclasses import dataclass

from dllm.samplers.constraints.token_dfa import _interegular


def _lark():
    try:
        import lark
    except ImportError as err:  # an optional dependency: say which extra brings it
        raise ImportError("grammar= needs lark: pip install 'dllm[structured]'") from err
    return lark


@dataclass(frozen=True, eq=False)
class Grammar:
    """Rules over terminal and nonterminal ids; ``terminal(t)`` is terminal id ``-1 - t``."""

    text: str  # the Lark source, for messages and caching
    start: int  # the start nonterminal
    rules: tuple[tuple[int, tuple[int, ...]], ...]  # (lhs, rhs)
    nonterminals: tuple[str, ...]  # names by id
    terminals: tuple[str, ...]  # names by index t (symbol id -1 - t)
    patterns: tuple[str, ...]  # each terminal's regex
    ignored: frozenset[int]  # indices of %ignore'd terminals (they never reach the rules)

    def nullable(self) -> frozenset[int]:
        """Nonterminals that derive the empty word."""
        found: set[int] = set()
        changed = True
        while changed:
            changed = False
            for lhs, rhs in self.rules:
                if lhs not in found and all(s >= 0 and s in found for s in rhs):
                    found.add(lhs)
                    changed = True
        return frozenset(found)


def parse_grammar(text: str, start: str = "start") -> Grammar:
    """Read a Lark grammar; ValueError naming the fix when Lark refuses it, a terminal is not a
    regular expression interegular compiles (lookarounds, backreferences) or matches the empty
    text."""
    lark = _lark()
    if not isinstance(text, str) or not text.strip():
        raise ValueError("grammar must be a non-empty str in Lark's EBNF (rules like 'start: item+')")
    try:
        parser = lark.Lark(text, parser="earley", lexer="dynamic", start=start)
    except lark.exceptions.LarkError as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]  # Lark adds the line and a caret
        raise ValueError(f"the grammar does not parse as Lark EBNF: {first[:400]}") from err
    terminals = tuple(t.name for t in parser.terminals)
    index = {name: t for t, name in enumerate(terminals)}
    patterns = tuple(_terminal_regex(t) for t in parser.terminals)
    names: dict[str, int] = {start: 0}
    rules = []
    for rule in parser.rules:
        lhs = names.setdefault(rule.origin.name, len(names))
        rhs = tuple(names.setdefault(s.name, len(names)) if not s.is_term else -1 - index[s.name]
                    for s in rule.expansion)
        rules.append((lhs, rhs))
    ordered = sorted(names, key=names.get)
    return Grammar(text=text, start=0, rules=tuple(rules), nonterminals=tuple(ordered), terminals=terminals,
                   patterns=patterns, ignored=frozenset(index[name] for name in parser.ignore_tokens))


def _terminal_regex(terminal) -> str:
    """The terminal's regex (flags inline), checked to compile and to match no empty text."""
    regex = terminal.pattern.to_regexp()
    try:
        fsm = _interegular().parse_pattern(regex).to_fsm()
    except Exception as err:  # noqa: BLE001  interegular raises its own parse errors and NotImplementedError
        raise ValueError(f"the grammar's terminal {terminal.name} = /{regex[:200]}/ is not a regular expression "
                         f"the constraint compiles ({type(err).__name__}: {err}); write it without lookarounds "
                         "or backreferences (common.ESCAPED_STRING has a lookbehind: use "
                         r'STRING: /"([^"\\]|\\.)*"/ instead)') from err
    if fsm.initial in fsm.finals:
        raise ValueError(f"the grammar's terminal {terminal.name} = /{regex[:200]}/ matches the empty text; "
                         "make it match at least one character (make the rule optional instead)")
    return regex
