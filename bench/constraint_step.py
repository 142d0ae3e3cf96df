"""A constraint's host time per decode step (mask the step's candidates, filter its commits) beside
the model forward's, for a small JSON schema, a nested schema with arrays and enums, a required
tool call over 2 and 8 tools and a recursive grammar.

Two settings. ``bundled``: ``generate_ids`` on the bundled model (a 1,286-token vocabulary), a
ragged batch of 3 prompts, the constraint's methods and the model forward each timed.
``synthetic``: the same constraints over a synthetic 151,000-token vocabulary (random 1-6
character strings over JSON's characters, as bench/constraint_compile.py builds; what the check
costs depends on the DFA's states and the vocabulary's size), driven without a model: 2 rows of
ragged answer lengths, random logits each step, 2 commits per row per step, in 32-token blocks.
Usage: python bench/constraint_step.py [--revision REV] [--settings bundled synthetic]
(REV: also run rows.py, canvas.py and the grammar check as they were at that commit, side by side in this process,
and check both decode the same tokens). On a shared CPU run it with OMP_NUM_THREADS=1: torch's
thread pool waiting on other jobs swings the forward's time several-fold between runs.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from dllm.api.tools import parse_tool_choice
from dllm.samplers.constraints import ConstraintSpec, compile_grammar, compile_regex

VOCABULARY = 151_000
CHANGED = ("canvas", "cfg_canvas", "token_grammar", "rows")  # the modules --revision loads as they were (in import order)
# rows.py's calls into canvas.py: the canvas check's own host work (the rest of mask_logits and
# filter_commit spreads the allowed classes over the vocabulary and applies the mask)
CANVAS = ("position_kinds", "canvas_sets", "allowed_classes", "completable", "completable_between")
SMALL = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
         "required": ["name", "age"], "additionalProperties": False}
NESTED = {"type": "object", "required": ["id", "items"], "additionalProperties": False, "properties": {
    "id": {"type": "integer"},
    "status": {"enum": ["open", "closed", "pending"]},
    "items": {"type": "array", "maxItems": 3, "items": {
        "type": "object", "required": ["sku", "tags"], "additionalProperties": False, "properties": {
            "sku": {"type": "string", "maxLength": 8},
            "kind": {"enum": ["book", "food", "tool"]},
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 2}}}}}}
GRAMMAR = r"""
start: list
list: "[" [item ("," item)*] "]"
item: list | NAME
NAME: /[a-z]/
"""


def _tools(count: int) -> dict:
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "parameters": {
        "type": "object", "required": ["query"], "properties": {
            "query": {"type": "string"}, "limit": {"type": "integer"}, "flag": {"type": "boolean"}}}}}
        for i in range(count)]
    return parse_tool_choice(tools, "required").schema()


# name -> (constraint spec options, answer tokens): a recursive grammar is checked up to 64 tokens
CASES = {"small schema": (dict(json_schema=SMALL), 64), "nested schema": (dict(json_schema=NESTED), 128),
         "tool call, 2 tools": (dict(json_schema=_tools(2)), 128),
         "tool call, 8 tools": (dict(json_schema=_tools(8)), 128), "grammar (recursive)": (dict(grammar=GRAMMAR), 24)}


def _modules_at(revision: str) -> dict:
    """CHANGED's modules as they were at ``revision``, loaded beside today's (imports between
    them rewritten to each other)."""
    folder, loaded = Path(tempfile.mkdtemp()), {}
    for name in CHANGED:
        source = subprocess.run(["git", "show", f"{revision}:dllm/samplers/constraints/{name}.py"], check=True,
                                capture_output=True, text=True).stdout
        for other in CHANGED:
            source = source.replace(f"dllm.samplers.constraints.{other} ", f"constraint_{other}_then ")
        path = folder / f"constraint_{name}_then.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        loaded[name] = module
    return loaded


class _Clock:
    """Seconds spent in a class's methods (and their calls), added up while installed; a call
    made inside another of the same label counts once, in the outer one."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.inside: set[str] = set()

    def wrap(self, owner, name: str, label: str | None = None) -> None:
        if not hasattr(owner, name):
            return
        inner, label = getattr(owner, name), label or name

        def timed(*args, **kwargs):
            if label in self.inside:
                return inner(*args, **kwargs)
            self.inside.add(label)
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.inside.discard(label)
                self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - start
                self.calls[label] = self.calls.get(label, 0) + 1

        setattr(owner, name, timed)

    def wrap_canvas(self, modules: dict) -> None:
        """Time a version's canvas check: rows.py's calls into canvas.py, and a grammar's parse,
        which runs when its sets are first asked (GrammarSets.completable / parsed)."""
        for name in CANVAS:
            self.wrap(modules["rows"], name, "canvas")
        for method in ("completable", "parsed"):
            self.wrap(modules["token_grammar"].GrammarSets, method, "canvas")


@dataclass
class _State:
    """What CanvasConstraints reads of a DecodeState, for a canvas without a model."""

    tokens: torch.Tensor
    end: torch.Tensor
    bs: int
    be: int
    mask_id: int
    canvas: SimpleNamespace
    runner: SimpleNamespace
    lead: None = None

    def eligible(self, tokens=None):
        tokens = self.tokens if tokens is None else tokens
        inside = torch.arange(self.bs, self.be)[None, :] < self.end[:, None]
        return (tokens[:, self.bs : self.be] == self.mask_id) & inside


def _as_version(dfa, modules: dict):
    """``dfa`` as the version of ``modules`` runs it: a grammar through that version's
    TokenGrammar (and so its Earley check), a token DFA as it is."""
    then = modules["token_grammar"].TokenGrammar
    if hasattr(dfa, "table") or isinstance(dfa, then):
        return dfa
    return then(grammar=dfa.grammar, lexer=dfa.lexer, vocab_size=dfa.vocab_size)


@contextlib.contextmanager
def _grammars_of(modules: dict):
    """While inside, a grammar that generate compiles is run by the version of ``modules``."""
    from dllm.samplers.constraints import token_grammar as now

    saved = now.TokenGrammar, now.cached_grammar
    now.TokenGrammar = modules["token_grammar"].TokenGrammar
    now.cached_grammar = lambda *args: _as_version(saved[1](*args), modules)
    try:
        yield
    finally:
        now.TokenGrammar, now.cached_grammar = saved


def _synthetic(modules: dict, dfa, answer: int, mask_id: int, eos_id: int, vocab: int,
               clock: _Clock) -> tuple[float, int, list]:
    """Decode 2 rows (answers of ``answer`` and 3/4 of it) under ``dfa`` from random logits:
    (constraint seconds, steps, final tokens); ``clock`` adds up the canvas check's part."""
    prompt, block, per_step = 8, 32, 2
    lengths = [answer, answer * 3 // 4]
    tokens = torch.full((2, prompt + answer), mask_id, dtype=torch.long)
    tokens[:, :prompt] = 1
    for r, n in enumerate(lengths):
        tokens[r, prompt + n :] = eos_id
    state = _State(tokens=tokens, end=torch.tensor([prompt + n for n in lengths]), bs=prompt, be=prompt,
                   mask_id=mask_id, canvas=SimpleNamespace(prompt_width=prompt),
                   runner=SimpleNamespace(active=torch.ones(2, dtype=torch.bool)))
    row = modules["rows"].RowConstraint(dfa=_as_version(dfa, modules))
    constraints = modules["rows"].CanvasConstraints([row, row], mask_id, [eos_id])
    constraints.check_start(state)
    clock.seconds.clear(), clock.calls.clear()
    generator, seconds, steps = torch.Generator().manual_seed(0), 0.0, 0
    for bs in range(prompt, prompt + answer, block):
        state.bs, state.be = bs, min(bs + block, prompt + answer)
        while state.eligible().any():
            logits = torch.randn((2, state.be - bs, vocab), generator=generator)
            began = time.perf_counter()
            masked = constraints.mask_logits(state, logits)
            seconds += time.perf_counter() - began
            prob, token = masked.softmax(-1).max(-1)
            eligible = state.eligible()
            score = torch.where(eligible, prob, -1.0)
            top = score.topk(min(per_step, score.shape[1]), -1).indices
            mask = torch.zeros_like(eligible).scatter_(1, top, True) & eligible
            began = time.perf_counter()
            mask = constraints.filter_commit(state, mask, token, scores=prob)
            seconds += time.perf_counter() - began
            window = state.tokens[:, bs : state.be]
            window.copy_(torch.where(mask, token, window))
            steps += 1
    return seconds, steps, state.tokens.tolist()


def _compiled(options: dict, spelled: tuple, eos_id: int):
    spec = ConstraintSpec.parse(**options)
    if spec.grammar is not None:
        return compile_grammar(spec.grammar, spelled, eos_id)
    return compile_regex(spec.to_regex(), spelled, eos_id)


def run_synthetic(versions: list) -> None:
    rng = random.Random(0)
    alphabet = 'abcdefghijklmnopqrstuvwxyz_{}[]":, 0123456789'
    spelled = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6))).encode() for _ in range(VOCABULARY)]
    mask_id, eos_id = VOCABULARY - 2, VOCABULARY - 1
    spelled[mask_id] = spelled[eos_id] = None
    spelled = tuple(spelled)
    print(f"synthetic {VOCABULARY}-token vocabulary, 2 rows, 2 commits per row per step; ms per step: "
          "constraint (mask + commit filter) / of it the canvas check")
    clock = _Clock()
    for _, modules in versions:
        clock.wrap_canvas(modules)
    for case, (options, answer) in CASES.items():
        dfa = _compiled(options, spelled, eos_id)
        if hasattr(dfa, "table"):
            shape = f"{dfa.num_states} states, {dfa.table.shape[1]} classes"
        else:
            shape = "Earley over the token lattice"
        cells, outs = [f"{case} ({shape}, {answer} tokens)"], []
        for name, modules in versions:
            seconds, steps, out = _synthetic(modules, dfa, answer, mask_id, eos_id, VOCABULARY, clock)
            cells.append(f"{name}: {1000 * seconds / steps:.2f} / {1000 * clock.seconds.get('canvas', 0.0) / steps:.2f}"
                         f" ms over {steps} steps")
            outs.append(out)
        if len(outs) == 2:
            cells.append(f"ratio {_ratio(cells)}" + ("" if outs[0] == outs[1] else " TOKENS DIFFER"))
        print(" | ".join(cells), flush=True)


def _ratio(cells: list[str]) -> str:
    """then / now, of the constraint's time and of the canvas check's."""
    (now, now_canvas), (then, then_canvas) = ([float(v) for v in c.split(": ")[1].split(" ms")[0].split(" / ")[:2]]
                                              for c in cells[1:3])
    return f"{then / now:.1f}x / {then_canvas / now_canvas:.1f}x"


def run_bundled(versions: list) -> None:
    import dllm
    import dllm.engine.decoding as decoding

    lm = dllm.load("dllm-waitingline-llada")
    prompts = ["Return the record as JSON.", "A much longer prompt that asks for the record as JSON, please.", "x"]
    ids = [lm.encode(p) for p in prompts]
    print("bundled model dllm-waitingline-llada, 3 ragged prompts, 2 tokens per step in 32-token blocks; "
          "ms per forward: constraint (mask + commit filter) / of it the canvas check / model forward")
    clock = _Clock()
    clock.wrap(type(lm.model), "forward", "forward")
    original = decoding.CanvasConstraints
    for name, modules in versions:
        for method in ("mask_logits", "filter_commit"):
            clock.wrap(modules["rows"].CanvasConstraints, method, "constraint")
        clock.wrap_canvas(modules)
    for case, (options, answer) in CASES.items():
        cells, outs = [case], []
        for name, modules in versions:
            decoding.CanvasConstraints = modules["rows"].CanvasConstraints
            try:
                clock.seconds.clear(), clock.calls.clear()
                with _grammars_of(modules):
                    out = lm.generate_ids(ids, max_tokens=answer, block_length=min(32, answer),
                                          steps=max(1, answer // 2), **options)
            finally:
                decoding.CanvasConstraints = original
            forwards = clock.calls.get("forward", 1)
            cells.append(f"{name}: {1000 * clock.seconds.get('constraint', 0.0) / forwards:.2f} / "
                         f"{1000 * clock.seconds.get('canvas', 0.0) / forwards:.2f} / "
                         f"{1000 * clock.seconds['forward'] / forwards:.2f} ms")
            outs.append(out.token_ids)
        if len(outs) == 2:
            cells.append(f"ratio {_ratio(cells)}" + ("" if outs[0] == outs[1] else " TOKENS DIFFER"))
        print(" | ".join(cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--revision", default=None, help="also run the constraint modules as they were at this commit")
    parser.add_argument("--settings", nargs="+", default=["bundled", "synthetic"], choices=["bundled", "synthetic"])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    args = parser.parse_args()
    for case in list(CASES):
        if case not in args.cases:
            del CASES[case]
    from dllm.samplers.constraints import rows, token_grammar

    versions = [("now", {"rows": rows, "token_grammar": token_grammar})]
    if args.revision:
        versions.append((args.revision, _modules_at(args.revision)))
    if "bundled" in args.settings:
        run_bundled(versions)
    if "synthetic" in args.settings:
        run_synthetic(versions)


if __name__ == "__main__":
    main()
