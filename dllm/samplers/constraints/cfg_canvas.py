"""Is a canvas with holes still completable into a word of a context-free grammar, and which
values may each hole take so that it stays so?

After Mündler et al. ("Constrained Decoding of Diffusion LLMs with Context-Free Grammars"): the
canvas is completable iff the grammar's language meets the regular language of its completions.
Here that regular language is a lattice over terminals: node (i, x) is answer position i with
lexer state x (lexer.py); a decided token at i, or any token at a hole, is an edge to position
i + 1 emitting the terminals its text completes (through private chain nodes when it completes
several); end-of-text at i (every later position a hole or end-of-text, i within the limit) is an
edge to the final node emitting the terminal left open. An Earley parse of the lattice in
position order (the Bar-Hillel intersection, computed only where reachable from the start)
decides emptiness; walking its derivations back from the final item marks the edges that lie on
a completion, and a hole allows exactly the tokens of its marked edges (and end-of-text where a
marked end lies at or before it).

Cost per check: Earley over N = positions x lexer states nodes, at worst O(N^3 x rules), plus one
scan per hole per edge group out of each reached lexer state (at most the vocabulary's size).
"""
from __future__ import annotations

import functools
import gc
import threading
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from dllm.samplers.constraints.canvas import EOS, HOLE
from dllm.samplers.constraints.grammar import Grammar
from dllm.samplers.constraints.lexer import BETWEEN, TokenLexer

_collector_lock = threading.Lock()
_collector = {"inside": 0, "was_enabled": False}  # paused calls running now; the collector's state before the first


def collector_paused(function):
    """``function`` with Python's cyclic collector paused while it runs (reference counting still
    frees). A chart is hundreds of thousands of small tuples and lists, none in a reference cycle,
    made in one go: the collector's scans of them, ever more often of the older generations as the
    chart grows, were ~40% of a parse (24 all-hole positions of bench/constraint_step.py's grammar).
    Paused calls nest and may run on several threads: the collector is back in its earlier state
    once the last of them returns."""
    @functools.wraps(function)
    def paused(*args, **kwargs):
        with _collector_lock:
            if _collector["inside"] == 0:
                _collector["was_enabled"] = gc.isenabled()
                gc.disable()
            _collector["inside"] += 1
        try:
            return function(*args, **kwargs)
        finally:
            with _collector_lock:
                _collector["inside"] -= 1
                if _collector["inside"] == 0 and _collector["was_enabled"]:
                    gc.enable()
    return paused


class _Parse:
    """One Earley parse of a canvas's lattice; ``items[node]`` maps (rule, dot, origin) to the
    ways it was derived (kept only when ``trace``). Nodes are ids that are never reused, so a
    parse resumed on a changed canvas (``_parse(held=)``) drops the nodes after the change and
    keeps the rest as they are."""

    def __init__(self, grammar: Grammar, lexer: TokenLexer, trace: bool) -> None:
        # the last rule: the augmented start, its left side a nonterminal id of its own (no rule's right
        # side holds it, so its completion moves nothing on; -1 is terminal 0's id, and completing the
        # start moved items waiting at the start node for terminal 0 on, as if it had been read)
        self.rules = [*grammar.rules, (len(grammar.nonterminals), (grammar.start,))]
        self.root = len(self.rules) - 1
        self.lhs = [lhs for lhs, _ in self.rules]
        self.rhs = [rhs for _, rhs in self.rules]
        self.by_lhs: dict[int, list[int]] = defaultdict(list)
        for r, (lhs, _) in enumerate(self.rules):
            self.by_lhs[lhs].append(r)
        self.nullable = grammar.nullable()
        self.lexer, self.trace, self.ignored = lexer, trace, grammar.ignored
        self.items: dict[int, dict] = {}
        self.waiting: dict[int, dict[int, list]] = {}  # by node: next symbol -> items expecting it
        self.completed: dict[int, dict] = {}  # by node: (nonterminal, origin) -> the complete items of it
        self.nodes: dict = {}
        self.position: dict[int, float] = {}  # by node: the position it lies at (chain nodes: their edge's)
        self.layers: dict[int, list] = defaultdict(list)  # position -> its ("p", i, x) keys, as made
        self.count = 0

    def node(self, key) -> int:
        if key not in self.nodes:
            v = self.nodes[key] = self.count
            self.count += 1
            self.items[v], self.waiting[v], self.completed[v] = {}, defaultdict(list), {}
            self.position[v] = key[1] if key[0] in "pc" else float("inf")
            if key[0] == "p":
                self.layers[key[1]].append(key)
        return self.nodes[key]

    def drop_after(self, at: int) -> None:
        """Forget what the positions from ``at`` on added: the nodes past ``at`` and the chain
        nodes of edges leaving them, and everything the final node holds. The nodes at ``at``
        stay, closed (they hold only what earlier positions scanned into them), and so do the
        chain nodes of edges leaving them (each holds what its emitted terminals make of them)."""
        for key, v in list(self.nodes.items()):
            if (key[0] in "pc" and key[1] > at) or key[0] == "f":
                del self.nodes[key], self.items[v], self.waiting[v], self.completed[v], self.position[v]
        for i in [i for i in self.layers if i > at]:
            del self.layers[i]

    def add(self, v: int, item: tuple, how: tuple, agenda: list | None) -> None:
        ways = self.items[v]
        if item not in ways:
            ways[item] = [how] if self.trace else None
            if agenda is not None:
                agenda.append(item)
        elif self.trace:
            ways[item].append(how)

    def close(self, v: int, agenda: list, predict: bool) -> None:
        """Complete, predict (at nodes between terminals) and step over nullable nonterminals."""
        lhs, rhs_of, waiting, ways, trace = self.lhs, self.rhs, self.waiting, self.items[v], self.trace
        done, here, nullable = self.completed[v], self.waiting[v], self.nullable
        while agenda:
            item = agenda.pop()
            r, dot, origin = item
            rhs = rhs_of[r]
            if dot == len(rhs):
                group = (lhs[r], origin)
                if group in done:  # its parents moved on already: only the way is new
                    done[group].append(item)
                    continue
                done[group] = [item]
                # origin is an earlier node, whose waiting items are final (or this one, for a
                # nullable nonterminal, whose later parents the Aycock-Horspool step moves on)
                # a completion's way is its origin alone (an int, no tuple made): its parent is the
                # item one dot back at the origin and its group (rhs[dot - 1], origin) (_allowed)
                for parent in waiting[origin].get(group[0], ()):
                    new = (parent[0], parent[1] + 1, parent[2])
                    if new not in ways:
                        ways[new] = [origin] if trace else None
                        agenda.append(new)
                    elif trace:
                        ways[new].append(origin)
                continue
            symbol = rhs[dot]
            expecting = here[symbol]
            expecting.append(item)
            if symbol >= 0:
                if predict and len(expecting) == 1:
                    for r2 in self.by_lhs[symbol]:
                        self.add(v, (r2, 0, v), ("p",), agenda)
                if symbol in nullable:  # Aycock and Horspool: step over what may derive nothing
                    self.add(v, (r, dot + 1, origin), ("n", item), agenda)

    def scan(self, u: int, at: int, terminals: tuple[int, ...], target: tuple, edge) -> None:
        """Items of node ``u`` (position ``at``) across an edge emitting ``terminals`` into the
        node ``target``. Chain nodes, one per (u, terminals so far), hold the items between two
        emitted terminals, and after the last one when the token goes on to start a terminal
        (its constituents are predicted there); each is closed when first filled."""
        pending = self.lexer.pending[target[2]] if target[0] == "p" else None
        chained = len(terminals) if pending is not None or not terminals else len(terminals) - 1
        current = u
        for k in range(chained):
            key = ("c", at, u, terminals[: k + 1])
            if key not in self.nodes:
                v, fresh = self.node(key), []
                for item in list(self.waiting[current].get(-1 - terminals[k], ())):
                    self.add(v, (item[0], item[1] + 1, item[2]), ("s", current, item, None), fresh)
                self.close(v, fresh, predict=True)
            current = self.nodes[key]
        v = self.node(target)
        if chained == len(terminals):  # no terminal left: copy what waits for the one started
            sources = (self.items[current] if pending is None or pending in self.ignored
                       else self.waiting[current].get(-1 - pending, ()))
            for item in list(sources):
                self.add(v, item, ("e", current, item, edge), None)
            return
        for item in list(self.waiting[current].get(-1 - terminals[-1], ())):
            self.add(v, (item[0], item[1] + 1, item[2]), ("s", current, item, edge), None)


@dataclass(eq=False)
class Parsed:
    """A canvas's parse: whether it is completable, and its chart (``parse``, None once a later
    canvas's parse resumed from it and took it over)."""

    kinds: np.ndarray
    tokens: np.ndarray
    limit: int
    completable: bool
    parse: _Parse | None
    final: int
    start: int

    def chart_items(self) -> int:
        """Items in the chart (0 once taken over): its memory, at about 0.3 KB an item traced
        (0.7 KB before a completion's way became an int)."""
        return 0 if self.parse is None else sum(len(ways) for ways in self.parse.items.values())

    def allowed(self, positions: np.ndarray, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
        """``allowed_tokens`` from this chart (it must have been traced and not taken over)."""
        if self.parse is None or not self.parse.trace:
            raise RuntimeError("this chart was not traced or a later parse took it over: parse the canvas again")
        return _allowed(self.parse, self.final, self.start, positions, vocab_size, self.completable)


@collector_paused
def parse_canvas(grammar: Grammar, lexer: TokenLexer, kinds: np.ndarray, tokens: np.ndarray, limit: int,
                 trace: bool = True, held: Parsed | None = None) -> Parsed:
    """Parse the lattice of the canvas (``kinds``: HOLE, EOS or a token's kind, ``tokens`` the ids).
    ``held``: the traced parse of an earlier canvas of the same grammar, lexer and limit (the
    last step's, or a commit filter's last trial), which this one takes over: the chart up to
    the first position where the canvases differ is the same (an Earley chart at position i
    depends only on positions before i), so only the positions from there on are parsed again,
    and the end-of-text edges into the final node (whether every later position may be
    end-of-text can change anywhere before the difference)."""
    L = len(kinds)
    tail_eos = np.ones(L + 1, dtype=bool)  # every position from i on may be end-of-text
    for i in range(L - 1, -1, -1):
        tail_eos[i] = tail_eos[i + 1] and kinds[i] in (HOLE, EOS)
    if held is not None and held.parse is not None and held.parse.trace and trace and held.limit == limit:
        p, held.parse = held.parse, None
        n = min(L, len(held.kinds))
        differ = np.flatnonzero((held.kinds[:n] != kinds[:n]) | (held.tokens[:n] != tokens[:n]))
        first = int(differ[0]) if len(differ) else n
        p.drop_after(first)
        start = p.nodes[("p", 0, BETWEEN)]
    else:
        p, first = _Parse(grammar, lexer, trace), None
        start = p.node(("p", 0, BETWEEN))
        agenda: list = []
        p.add(start, (p.root, 0, start), ("p",), agenda)
    final = p.node(("f",))
    done = (p.root, 1, start)

    def end(u: int, i: int, x: int) -> None:
        """The end-of-text edge from node ``u`` (position ``i``, lexer state ``x``), if any."""
        if tail_eos[i] and i <= limit and lexer.ends[x] is not None:  # the word may end here
            ends = lexer.ends[x]
            if ends:
                p.scan(u, i, ends, ("f",), ("end", i))
            elif done in p.items[u]:
                p.add(final, done, ("e", u, done, ("end", i)), None)

    for i in range(first or 0):  # resumed: the kept positions' end edges, from the closed nodes
        for key in p.layers[i]:
            end(p.nodes[key], i, key[2])
    for i in range(first or 0, L + 1):
        for key in list(p.layers[i]):
            u, x = p.nodes[key], key[2]
            if i != first:  # a resumed parse's nodes at ``first`` were closed before
                p.close(u, list(p.items[u]), predict=lexer.pending[x] is None or lexer.pending[x] in grammar.ignored)
            end(u, i, x)
            if i == L or i >= limit or kinds[i] == EOS:
                continue
            if kinds[i] == HOLE:
                edges = [(lexer.groups[g][1], lexer.groups[g][2], (i, g)) for g in lexer.state_groups[x]]
            else:
                known = lexer.token_edges[tokens[i]] if tokens[i] < len(lexer.token_edges) else None
                edges = [(w, y, (i, None)) for w, y in (known or {}).get(x, ())]
            for emitted, y, edge in edges:
                p.scan(u, i, emitted, ("p", i + 1, y), edge)
    p.close(final, list(p.items[final]), predict=False)
    return Parsed(kinds=kinds, tokens=tokens, limit=limit, completable=done in p.items[final], parse=p,
                  final=final, start=start)


def completable(grammar: Grammar, lexer: TokenLexer, kinds: np.ndarray, tokens: np.ndarray, limit: int) -> bool:
    return parse_canvas(grammar, lexer, kinds, tokens, limit, trace=False).completable


def allowed_tokens(grammar: Grammar, lexer: TokenLexer, kinds: np.ndarray, tokens: np.ndarray, limit: int,
                   positions: np.ndarray, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """For holes at ``positions`` (K,): (K, V) bool, the tokens that keep the canvas completable,
    and (K,) bool, whether end-of-text does (all False when it is not completable)."""
    return parse_canvas(grammar, lexer, kinds, tokens, limit).allowed(positions, vocab_size)


@collector_paused
def _allowed(p: _Parse, final: int, start: int, positions: np.ndarray, vocab_size: int,
             found: bool) -> tuple[np.ndarray, np.ndarray]:
    """``allowed_tokens`` from a traced parse: the edges on derivations of the final item. The walk
    back from the final item only goes to earlier (or the same) positions, and an edge leaving
    position i is read off the ways of the nodes at i + 1 (end-of-text edges: the final node's),
    so it stops at the nodes at or before the first hole asked: none of their edges is wanted."""
    allowed = np.zeros((len(positions), vocab_size), dtype=bool)
    eos = np.zeros(len(positions), dtype=bool)
    done = (p.root, 1, start)
    if not found:
        return allowed, eos
    used: set = set()
    first = min((int(i) for i in positions), default=float("inf"))
    position = p.position
    seen: dict[int, set] = defaultdict(set)  # node -> its items on the stack already
    seen[final].add(done)
    groups: dict[int, set] = defaultdict(set)  # node -> the groups whose complete items are on the stack already,
    symbols = {s for rhs in p.rhs for s in rhs} | set(p.lhs)  # each (symbol, origin) as one int (no tuple made)
    low, span = min(symbols), max(symbols) - min(symbols) + 1
    stack = [(final, done)]
    items, completed, rhs_of = p.items, p.completed, p.rhs
    while stack:
        v, item = stack.pop()
        here, marked = seen[v], groups[v]
        r, dot, origin = item
        if dot:  # ways by completion (ints, each an origin) share these
            symbol, parent = rhs_of[r][dot - 1], (r, dot - 1, origin)
        for how in items[v][item]:
            if how.__class__ is int:  # a completion from origin ``how``: once every complete item
                if how * span + symbol - low not in marked:  # of the group that moved it on
                    marked.add(how * span + symbol - low)
                    for whole in completed[v][(symbol, how)]:
                        if whole not in here:
                            here.add(whole)
                            stack.append((v, whole))
                if position[how] > first and parent not in seen[how]:  # and its parent
                    seen[how].add(parent)
                    stack.append((how, parent))
                continue
            kind = how[0]
            if kind == "p":
                continue
            if kind == "n":
                u, source = v, how[1]
            else:  # the source of a scan or a copy across an edge
                u, source = how[1], how[2]
                if how[3] is not None:
                    used.add(how[3])
            if position[u] > first and source not in seen[u]:
                seen[u].add(source)
                stack.append((u, source))
    row = {int(pos): k for k, pos in enumerate(positions)}
    picked: dict[int, list[np.ndarray]] = defaultdict(list)  # hole -> the token groups of its marked edges
    first_end = None
    for where, group in used:
        if where == "end":
            first_end = group if first_end is None else min(first_end, group)
        elif group is not None and where in row:
            picked[row[where]].append(p.lexer.group_tokens[group])
    for k, groups in picked.items():  # one indexed write per hole, not one per group
        allowed[k, np.concatenate(groups)] = True
    if first_end is not None:
        eos[np.asarray(positions) >= first_end] = True
    return allowed, eos
