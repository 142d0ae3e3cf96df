"""What each token does to a grammar's terminals: from each lexer state, the terminals its text
completes and the state it leaves, for every token of a vocabulary at once.

A lexer state is 0 (between terminals) or a terminal with the state of its character DFA
(interegular) after a non-empty prefix of it. A character either continues the current terminal
or, where the terminal may end, completes it and starts the next one: every split of the text
into terminals is followed (no longest match), ``%ignore``d terminals completing without a
trace. A terminal whose DFA can go no further completes at once. A token's *edge* from state
``x`` is ``(emitted, y)``: the terminals completed on the way and the state after its text.
Edges whose emitted terminals hold a pair no sentence of the grammar puts side by side are
dropped. Tokens are walked as a trie (each prefix once), so the cost is the vocabulary's
characters times the live (state, emitted) pairs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dllm.samplers.constraints.grammar import Grammar
from dllm.samplers.constraints.token_dfa import _interegular

BETWEEN = 0  # the lexer state between terminals


@dataclass(frozen=True, eq=False)
class TokenLexer:
    """The edges of every token from every lexer state it can be read in."""

    states: tuple[tuple[int, int] | None, ...]  # by id: None (between terminals) or (terminal, DFA state)
    pending: tuple[int | None, ...]  # by state: the terminal it is inside, None between terminals
    ends: tuple[tuple[int, ...] | None, ...]  # by state: terminals emitted if the text ends here (None: it cannot)
    token_edges: tuple[dict[int, tuple[tuple[tuple[int, ...], int], ...]] | None, ...]  # by token: x -> edges
    groups: tuple[tuple[int, tuple[int, ...], int], ...]  # (x, emitted, y) by group id
    group_tokens: tuple[np.ndarray, ...]  # by group id: the token ids with that edge
    state_groups: tuple[tuple[int, ...], ...]  # by state: the group ids leaving it (a hole's edges)


class _Machine:
    """Terminal DFAs stepped one character at a time."""

    def __init__(self, grammar: Grammar) -> None:
        interegular = _interegular()
        self.fsms = [interegular.parse_pattern(p).to_fsm() for p in grammar.patterns]
        self.live = [live_states(f) for f in self.fsms]
        self.ignored = grammar.ignored
        self.states: list[tuple[int, int] | None] = [None]
        self.number: dict[tuple[int, int], int] = {}
        self.memo: dict[tuple[int, str], tuple[tuple[tuple[int, ...], int], ...]] = {}

    def state(self, terminal: int, dfa_state) -> int:
        key = (terminal, dfa_state)
        if key not in self.number:
            self.number[key] = len(self.states)
            self.states.append(key)
        return self.number[key]

    def _move(self, terminal: int, dfa_state, ch: str):
        fsm = self.fsms[terminal]
        target = fsm.map.get(dfa_state, {}).get(fsm.alphabet[ch])
        return target if target in self.live[terminal] else None

    def _emit(self, terminal: int) -> tuple[int, ...]:
        return () if terminal in self.ignored else (terminal,)

    def _settle(self, terminal: int, dfa_state) -> tuple[tuple[int, ...], int]:
        """A terminal that can go no further completes at once."""
        fsm = self.fsms[terminal]
        if dfa_state in fsm.finals and not any(t in self.live[terminal] for t in fsm.map.get(dfa_state, {}).values()):
            return self._emit(terminal), BETWEEN
        return (), self.state(terminal, dfa_state)

    def step(self, x: int, ch: str) -> tuple[tuple[tuple[int, ...], int], ...]:
        """Every (emitted, next state) after reading ``ch`` in state ``x``."""
        key = (x, ch)
        if key in self.memo:
            return self.memo[key]
        out = []
        if x == BETWEEN:
            for terminal, fsm in enumerate(self.fsms):
                target = self._move(terminal, fsm.initial, ch)
                if target is not None:
                    out.append(self._settle(terminal, target))
        else:
            terminal, dfa_state = self.states[x]
            target = self._move(terminal, dfa_state, ch)
            if target is not None:
                out.append(self._settle(terminal, target))
            if dfa_state in self.fsms[terminal].finals:
                done = self._emit(terminal)
                out.extend((done + emitted, y) for emitted, y in self.step(BETWEEN, ch))
        self.memo[key] = tuple(dict.fromkeys(out))
        return self.memo[key]


def live_states(fsm) -> set:
    """States of ``fsm`` from which a final state is reachable."""
    live = set(fsm.finals)
    changed = True
    while changed:
        changed = False
        for state, moves in fsm.map.items():
            if state not in live and any(t in live for t in moves.values()):
                live.add(state)
                changed = True
    return live


def adjacent_pairs(grammar: Grammar) -> set[tuple[int, int]]:
    """Terminal index pairs (a, b) that some sentence of the grammar writes side by side."""
    nullable = grammar.nullable()
    first: dict[int, set[int]] = {}
    last: dict[int, set[int]] = {}

    def ends(symbol: int, table: dict[int, set[int]]) -> set[int]:
        return {-1 - symbol} if symbol < 0 else table.setdefault(symbol, set())

    changed = True
    while changed:
        changed = False
        for lhs, rhs in grammar.rules:
            for table, order in ((first, rhs), (last, rhs[::-1])):
                target = table.setdefault(lhs, set())
                for symbol in order:
                    new = ends(symbol, table) - target
                    if new:
                        target |= new
                        changed = True
                    if symbol < 0 or symbol not in nullable:
                        break
    pairs: set[tuple[int, int]] = set()
    for _, rhs in grammar.rules:
        for i, left in enumerate(rhs):
            for right in rhs[i + 1 :]:
                pairs |= {(a, b) for a in ends(left, last) for b in ends(right, first)}
                if right < 0 or right not in nullable:
                    break
    return pairs


def build_lexer(grammar: Grammar, spelled: tuple[bytes | None, ...], eos_id: int) -> TokenLexer:
    """Every token's edges from every lexer state (tokens spelling no whole UTF-8 text, special
    tokens and end-of-text have none)."""
    machine = _Machine(grammar)
    pairs = adjacent_pairs(grammar)
    texts = {}
    for token, text in enumerate(spelled):
        if text and token != eos_id:
            try:
                texts[token] = text.decode("utf-8")
            except UnicodeDecodeError:
                continue  # a piece of a character: never allowed
    # (state it started in, emitted, state now) after each prefix, from every start state at once;
    # states are numbered as they are met, so the start set grows until no prefix finds a new one
    prefix: dict[str, frozenset] = {}
    known = 0
    while known < len(machine.states):
        known = len(machine.states)
        prefix = {"": frozenset((x, (), x) for x in range(known))}
        for text in sorted(set(texts.values())):
            for end in range(1, len(text) + 1):
                if text[:end] not in prefix:
                    prefix[text[:end]] = frozenset(
                        (x0, emitted + more, y) for x0, emitted, x in prefix[text[: end - 1]]
                        for more, y in machine.step(x, text[end - 1])
                        if _fits(emitted + more, len(emitted), pairs))
    groups: dict[tuple[int, tuple[int, ...], int], list[int]] = {}
    token_edges: list[dict | None] = [None] * len(spelled)
    for token, text in texts.items():
        by_state: dict[int, list] = {}
        for x0, emitted, y in prefix[text]:
            by_state.setdefault(x0, []).append((emitted, y))
            groups.setdefault((x0, emitted, y), []).append(token)
        token_edges[token] = {x: tuple(edges) for x, edges in by_state.items()}
    keys = list(groups)
    state_groups: list[list[int]] = [[] for _ in machine.states]
    for gid, (x0, _, _) in enumerate(keys):
        state_groups[x0].append(gid)
    pending = tuple(None if s is None else s[0] for s in machine.states)
    ends = tuple(() if s is None else (machine._emit(s[0]) if s[1] in machine.fsms[s[0]].finals else None)
                 for s in machine.states)
    return TokenLexer(states=tuple(machine.states), pending=pending, ends=ends, token_edges=tuple(token_edges),
                      groups=tuple(keys), group_tokens=tuple(np.array(groups[k], dtype=np.int64) for k in keys),
                      state_groups=tuple(tuple(g) for g in state_groups))


def _fits(emitted: tuple[int, ...], old: int, pairs: set[tuple[int, int]]) -> bool:
    """The newly emitted terminals make no pair the grammar never writes side by side."""
    return all((emitted[i - 1], emitted[i]) in pairs for i in range(max(old, 1), len(emitted)))
