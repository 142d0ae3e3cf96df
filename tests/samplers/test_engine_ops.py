"""The engine's own work per decode round stays bounded: ATen ops dispatched outside the model's
forward (each a kernel launch on a GPU), counted by ``dllm.bench.engine_ops`` for the default rule
(``low_confidence``, stop at end-of-text) with the dual cache on the tiny LLaDA.

What a round inside its window costs (63 ops, measured): on a CPU, 29 of them are the torch
statistics path (one Triton kernel on CUDA); the rest are the forward's charge (5), the canvas's
eligible positions (1: computed once a round, read by the charge, the LM head's rows, the rule and
the commit), the rule's quota and top-k (10), the commit (5), the round count (1), the end-of-text
check over the answer and the stop of finished rows (8), and the loop's "does any row still move"
(4, one host read). Before this bound the same round took 89 (``eligible`` five times a round, the
end-of-text check in 13 ops, casts and fresh ``arange`` / ``ones_like`` buffers each round)."""
from __future__ import annotations

from dllm import GenerationConfig
from dllm.bench.engine_ops import EngineOpCounter
from dllm.engine.decoding import Decoding, RowStart

IN_WINDOW = 63  # a round that stays in its decision window
PER_ROUND = 66  # the mean over a decode: window starts and the first forward's K/V buffers included
PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11]]  # ragged: the padded canvas's path


def test_engine_ops_per_round_are_bounded(tiny_models):
    model = tiny_models["llada"].model
    config = GenerationConfig(gen_length=32, block_length=8, steps=16, cache="dual")
    decoding = Decoding(model, [RowStart(prefix=p, gen_length=32) for p in PROMPTS], config)
    rounds, total, in_window = 0, 0, []
    while not decoding.done:
        window = decoding.window
        with EngineOpCounter(model, sites=True) as ops:
            decoding.step()
        rounds, total = rounds + 1, total + ops.kernels
        if rounds > 1 and decoding.window == window:
            in_window.append((ops.kernels, ops.by_site))
    assert rounds == 16 and len(in_window) == 11  # 4 windows of 4 rounds: one decode's worth
    worst, sites = max(in_window, key=lambda r: r[0])
    detail = ", ".join(f"{site} {name} x{n}" for (site, kind, name), n in sites.most_common() if kind == "op")
    assert worst <= IN_WINDOW, f"{worst} ops in one round outside the forward (bound {IN_WINDOW}): {detail}"
    assert total / rounds <= PER_ROUND, f"{total / rounds:.1f} ops a round over the decode (bound {PER_ROUND})"
