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

import re
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
        raise ValueError(f"the grammar does not parse as Lark EBNF: {first[:400]}{_syntax_hint(text, start)}") from err
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


def _syntax_hint(text: str, start: str) -> str:
    """What to change when a grammar is written in another well-known syntax, or lacks its start
    rule (vLLM's guided_grammar takes GBNF / EBNF with ``root ::= ...``; Lark reads neither)."""
    if re.search(r"^\s*<?[\w-]+>?\s*::=", text, re.MULTILINE):  # a rule line, not a quoted '::='
        return (f"; '::=' is GBNF / BNF, which dllm does not read: write each rule as 'name: ...' (Lark EBNF), "
                f"the whole answer's rule named {start!r}")
    if not any(line.strip().lstrip("?!").startswith((f"{start}:", f"{start} "))
               for line in text.splitlines()):
        return f"; the whole answer's rule must be named {start!r} ({start}: ...)"
    return ""


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


def grammar_regex(grammar: Grammar, max_length: int = 100_000) -> str | None:
    """The grammar's language as one regex when no rule reaches itself except as ``X: X a | b``
    (Lark's expansion of ``*`` and ``+``: b a*), None when it is recursive otherwise or the
    inlined regex would pass ``max_length`` characters. %ignore'd terminals may come before every
    terminal and at the end, as between-terminal text."""
    rules: dict[int, list[tuple[int, ...]]] = {}
    for lhs, rhs in grammar.rules:
        rules.setdefault(lhs, []).append(rhs)
    ignored = "|".join(f"(?:{grammar.patterns[t]})" for t in sorted(grammar.ignored))
    skip = f"(?:{ignored})*" if ignored else ""
    done: dict[int, str] = {}

    def inline(symbol: int, path: frozenset[int]) -> str | None:
        if symbol < 0:
            return f"{skip}(?:{grammar.patterns[-1 - symbol]})"
        if symbol in path:
            return None  # recursive
        if symbol not in done:
            alternatives = {False: [], True: []}  # (starts with the symbol itself) -> the rest
            for rhs in rules.get(symbol, []):
                looped = bool(rhs) and rhs[0] == symbol
                pieces = [inline(s, path | {symbol}) for s in rhs[looped:]]
                if any(p is None for p in pieces):
                    return None
                alternatives[looped].append("".join(pieces))
            base = "(?:" + "|".join(alternatives[False]) + ")" if alternatives[False] else "(?!)"
            loop = "(?:" + "|".join(alternatives[True]) + ")*" if alternatives[True] else ""
            done[symbol] = f"(?:{base}{loop})"
            if len(done[symbol]) > max_length:
                return None
        return done[symbol]

    body = inline(grammar.start, frozenset())
    return None if body is None else body + skip
