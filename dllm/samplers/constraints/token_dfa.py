"""A regular expression compiled once against a vocabulary: which DFA state each token leads to
from each state, with tokens of identical behaviour grouped into classes.

interegular parses the regex (Python's syntax; outlines-core's ``build_regex_from_schema`` writes
JSON schemas in it) into a character DFA; this module walks every token's text through it from
every state at once (numpy, one gather per character position, a chunk of tokens at a time so a
150k-token vocabulary never needs a states x vocabulary table) and keeps dense tables the canvas
check reads with array operations: ``table`` (S + 1, C) next state per (state, token class), row
and column S being the dead state, ``token_class`` (V,) the class of each id. Special tokens, the
mask id, end-of-text and tokens that are not whole UTF-8 characters (a byte-level piece of one)
are in the dead class: end-of-text is the word's end, handled by the canvas check, and a
character written only byte by byte cannot appear in a constrained answer.

outlines-core's own token index (``Index``) is not used: in 0.2.14 it drops transitions out of
an accepting state into a non-accepting one (``(ba)+`` over tokens "b", "a" stops after "ba"),
which tests/constraints/test_canvas_check.py's brute force finds.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

# a DFA's tables (next state per state and token class, and state-to-state successors): refused above
MAX_TABLE_BYTES = 1 << 30
CHUNK_BYTES = 64 << 20  # the tokens walked at once: a (states x chunk) int32 block of this size


class TableTooLarge(ValueError):
    """A constraint whose tables would take more than ``MAX_TABLE_BYTES``: refused, not built."""


def _interegular():
    try:
        import interegular
    except ImportError as err:  # an optional dependency: say which extra brings it
        raise ImportError("structured output (regex=, choice=, json_schema=) needs interegular: "
                          "pip install 'dllm[structured]'") from err
    return interegular


def unanchored(regex: str) -> str:
    """``regex`` without a leading ``^`` and a trailing unescaped ``$``: a constraint matches the
    whole answer, so they change nothing there, and interegular does not parse anchors."""
    if regex.startswith("^"):
        regex = regex[1:]
    if regex.endswith("$") and (len(regex) - len(regex[:-1].rstrip("\\")) - 1) % 2 == 0:
        regex = regex[:-1]
    return regex


@dataclass(frozen=True, eq=False)
class TokenDFA:
    """A regular language over a vocabulary's token ids (end-of-text excluded)."""

    regex: str
    start: int  # initial state
    final: np.ndarray  # (S + 1,) bool: accepting states (the dead state S is not)
    table: np.ndarray  # (S + 1, C) int32: next state per state and token class
    token_class: np.ndarray  # (V,) int64: class of each token id
    succ: np.ndarray  # (S + 1, S + 1) bool: some token leads from state s to state t (never to S)
    dead_class: int  # the class of ids never allowed: every state -> S

    @property
    def num_states(self) -> int:
        return self.table.shape[0]

    def shortest_word(self) -> int | None:
        """The fewest tokens of a word from the initial state (None: the language is empty
        over this vocabulary): breadth-first over ``succ``."""
        frontier = np.zeros(self.num_states, dtype=bool)
        frontier[self.start] = True
        seen = frontier.copy()
        for length in range(self.num_states):
            if (frontier & self.final).any():
                return length
            frontier = self.succ[frontier].any(0) & ~seen
            seen |= frontier
            if not frontier.any():
                return None
        return None

    def longest_word(self) -> int | None:
        """The most tokens of a word (None: words of any length, or none): the longest path from the
        initial state to an accepting one through states that lie on some word's path; a cycle
        among those means no bound. Found once per DFA (a server sees the same schema again)."""
        return self._longest

    @functools.cached_property
    def _longest(self) -> int | None:
        """``longest_word``: breadth-first sweeps and a topological order, O(S^2)."""
        succ = self.succ
        reach = np.zeros(self.num_states, dtype=bool)
        reach[self.start] = True
        frontier = reach.copy()
        while frontier.any():  # states some prefix reaches
            frontier = succ[frontier].any(0) & ~reach
            reach |= frontier
        useful = self.final & reach
        frontier = useful.copy()
        while frontier.any():  # ... from which an accepting state is reachable
            frontier = succ[:, frontier].any(1) & reach & ~useful
            useful |= frontier
        if not useful[self.start]:
            return None
        edges = succ & useful[:, None] & useful[None, :]
        indegree = edges.sum(0)
        order, ready = [], [s for s in np.flatnonzero(useful) if indegree[s] == 0]
        while ready:  # Kahn's topological order; states left over lie on a cycle
            state = ready.pop()
            order.append(state)
            for target in np.flatnonzero(edges[state]):
                indegree[target] -= 1
                if indegree[target] == 0:
                    ready.append(target)
        if len(order) < int(useful.sum()):
            return None
        most = np.full(self.num_states, -1, dtype=np.int64)
        most[self.start] = 0
        for state in order:
            if most[state] >= 0:
                targets = np.flatnonzero(edges[state])
                most[targets] = np.maximum(most[targets], most[state] + 1)
        return int(most[self.final].max())

    @functools.cached_property
    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """(sources, targets) of every pair of ``succ``: a set of states' successors (or
        predecessors) in one gather over them, far fewer than states^2 (canvas.py)."""
        return np.nonzero(self.succ)

    @functools.cached_property
    def moves(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The moves into a live state, grouped by class: (state, target) of each, the classes
        that have one and where each class's group starts (canvas.allowed_classes)."""
        classes, states = np.nonzero(self.table.T != self.num_states - 1)
        present, starts = np.unique(classes, return_index=True)
        return states, self.table[states, classes].astype(np.int64), present, starts

    def run(self, state: int, tokens: list[int]) -> int:
        """The state after ``tokens`` (the dead state if they leave the language's prefixes)."""
        for token in tokens:
            state = int(self.table[state, self.token_class[token]])
        return state


def compile_regex(regex: str, spelled: tuple[bytes | None, ...], eos_id: int) -> TokenDFA:
    """Compile ``regex`` (a whole-answer match) against the vocabulary whose id i writes
    ``spelled[i]`` (None: never allowed). Raises ValueError naming the regex when it does not parse."""
    interegular = _interegular()
    try:
        fsm = interegular.parse_pattern(regex).to_fsm()
    except Exception as err:  # noqa: BLE001  interegular raises its own parse errors and NotImplementedError
        raise ValueError(f"the regex {regex[:200]!r} cannot be compiled ({type(err).__name__}: {err}); "
                         "use Python's regex syntax without backreferences or lookarounds") from err
    states = sorted(fsm.states)
    number = {name: i for i, name in enumerate(states)}
    dead, symbols = len(states), max(fsm.alphabet.values(), default=-1) + 1
    V = len(spelled)
    if (dead + 1) ** 2 > MAX_TABLE_BYTES:  # succ below, one byte per pair of states
        raise TableTooLarge(f"the regex's DFA has {dead} states: its successor table would take "
                            f"{(dead + 1) ** 2 >> 20} MiB; simplify the pattern or the schema")
    # the character DFA, plus a padding symbol that leaves every state where it is and a symbol
    # for characters outside the alphabet (a regex without a catch-all class has none for them)
    chars = np.full((dead + 1, symbols + 2), dead, dtype=np.int32)
    chars[:, symbols] = np.arange(dead + 1)
    for name, moves in fsm.map.items():
        for symbol, target in moves.items():
            chars[number[name], symbol] = number[target]
    texts: list[tuple[int, list[int]]] = []
    for token, text in enumerate(spelled):
        if not text or token == eos_id:
            continue
        try:
            decoded = text.decode("utf-8")
        except UnicodeDecodeError:
            continue  # a piece of a character: never allowed
        texts.append((token, [_symbol(fsm.alphabet[ch], symbols + 1) for ch in decoded]))
    texts.sort(key=lambda item: -len(item[1]))  # the tokens still walking are a prefix at each step
    ids = np.array([t for t, _ in texts], dtype=np.int64)
    token_class = np.zeros(V + 1, dtype=np.int64)  # class 0: never allowed (and column V, the dead class)
    columns = {np.full(dead + 1, dead, dtype=np.int32).tobytes(): 0}
    step = max(1, CHUNK_BYTES // (4 * (dead + 1)))
    for lo in range(0, len(texts), step):
        current = _walk(chars, texts[lo:lo + step], dead, symbols)  # (S + 1, chunk)
        unique, inverse = _distinct_columns(current)
        found = np.array([columns.setdefault(unique[:, k].tobytes(), len(columns)) for k in range(unique.shape[1])])
        token_class[ids[lo:lo + step]] = found[inverse]
        if (dead + 1) * len(columns) * 4 > MAX_TABLE_BYTES:
            raise TableTooLarge(f"the regex's DFA has {dead} states and its tokens behave in at least {len(columns)} "
                                f"ways: its table would take over {(dead + 1) * len(columns) * 4 >> 20} MiB; "
                                "simplify the pattern or the schema")
    table = np.stack([np.frombuffer(column, dtype=np.int32) for column in columns], axis=1)
    final = np.zeros(dead + 1, dtype=bool)
    final[[number[s] for s in fsm.finals]] = True
    succ = np.zeros((dead + 1, dead + 1), dtype=bool)
    rows = np.repeat(np.arange(dead + 1), table.shape[1])
    succ[rows, table.reshape(-1)] = True
    succ[:, dead] = False
    return TokenDFA(regex=regex, start=number[fsm.initial], final=final,
                    table=np.ascontiguousarray(table, dtype=np.int32), token_class=token_class[:V], succ=succ,
                    dead_class=int(token_class[V]))


def _walk(chars: np.ndarray, texts: list[tuple[int, list[int]]], dead: int, padding: int) -> np.ndarray:
    """(S + 1, len(texts)): the state each token's text (character symbols, longest first) leads to
    from every state, one gather per character position over the tokens still walking."""
    longest = len(texts[0][1]) if texts else 0
    walk = np.full((len(texts), longest), padding, dtype=np.int32)
    for row, (_, syms) in enumerate(texts):
        walk[row, : len(syms)] = syms
    lengths = np.array([len(syms) for _, syms in texts])
    current = np.repeat(np.arange(dead + 1, dtype=np.int32)[:, None], len(texts), 1)
    flat, width = chars.ravel(), chars.shape[1]
    for j in range(longest):
        live = int((lengths > j).sum())
        current[:, :live] = flat[current[:, :live] * width + walk[None, :live, j]]  # chars[state, symbol]
    return current


def _distinct_columns(current: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct columns of ``current``, each column's index among them): grouped by a random
    64-bit hash of each column, then checked equal to their group's first (``np.unique(axis=1)``
    when a collision is found: it sorts whole columns, tens of times slower)."""
    weights = np.random.default_rng(0).integers(1, 1 << 62, size=current.shape[0], dtype=np.int64)
    with np.errstate(over="ignore"):
        hashes = weights @ current.astype(np.int64)  # wraps around: a hash, not a sum
    _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    if not (current == current[:, first[inverse]]).all():  # two columns of one hash differ
        unique, inverse = np.unique(current, axis=1, return_inverse=True)
        return unique, inverse.reshape(-1)
    return current[:, first], inverse.reshape(-1)


def _symbol(symbol: int | None, outside: int) -> int:
    return outside if symbol is None else symbol


@functools.lru_cache(maxsize=32)
def cached_dfa(regex: str, spelled: tuple[bytes | None, ...], eos_id: int) -> TokenDFA:
    """``compile_regex`` once per (regex, vocabulary): a server sees the same schema again."""
    return compile_regex(regex, spelled, eos_id)
