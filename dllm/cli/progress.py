"""``dllm generate``'s decode with feedback: a bar of answer tokens committed, step by step, so a
long decode shows it moves (a bar of prompts stays at 0/2 for the whole of one batch), and the
resolved configuration once under ``-v``.

The batch runs the engine's own ``Decoding`` one round at a time, as ``DiffusionLM.generate_ids``
runs it to the end (same rows, seeds and cut, ``tests/test_cli_generate_request.py`` holds them
equal); the count of committed tokens is read only while the bar is shown.
"""
from __future__ import annotations

import logging

from dllm.cli.output import LOGGER_NAME, progress_bar

log = logging.getLogger(LOGGER_NAME)
BAR_DELAY_S = 1.0  # a decode shorter than this shows no bar


def describe(model, config) -> str:
    """The run as it will decode: the model, then the config with its derived values resolved
    (block and step budget after the model's block rule, the policies)."""
    from dllm.engine.block_alignment import model_block_windows

    resolved = model_block_windows(model.model, config)
    parts = [f"gen_length={resolved.gen_length}", f"block_length={resolved.block_length}", f"steps={resolved.steps}",
             f"policy={resolved.policy} {resolved.policy_args}", f"strategy={resolved.strategy} {resolved.strategy_args}",
             f"stopper={resolved.stopper}", f"cache={resolved.cache} {resolved.cache_args}",
             f"temperature={resolved.temperature}", f"seed={resolved.seed}"]
    return f"{model!r}: " + ", ".join(parts)


def answer_length(config, request) -> int:
    """Answer tokens a row commits at most: ``max_tokens``, else the canvas."""
    return min(config.gen_length, request.max_tokens or config.gen_length)


def answer_bar(rows: int, config, request, *, quiet: bool, enabled: bool = True):
    """A bar of the answer tokens of ``rows`` rows, shown on a terminal once the decode has run
    ``BAR_DELAY_S``."""
    return progress_bar(rows * answer_length(config, request), desc="generate", quiet=quiet, unit="token",
                        enabled=enabled, delay=BAR_DELAY_S)


def generate_batch(lm, ids: list[list[int]], config, request, bar, constraint=None, options=None):
    """``lm.generate_ids(ids, config, **options, ...)`` for ``request``, advancing ``bar`` by the
    answer tokens committed after each round (counted only when the bar is shown); ``constraint``:
    every row's (``dllm.api.structured.row_constraint``), None for free answers."""
    import torch

    from dllm.api.decided import decided_rows
    from dllm.api.inputs import check_token_ids
    from dllm.api.request import merge_config, row_seeds
    from dllm.engine.decoding import Decoding, RowStart

    ids = check_token_ids(ids, lm.model.config.vocab_size)
    config = merge_config(config, options or {}, request.max_tokens, model=lm.model)
    rows = [prompt for prompt in ids for _ in range(request.n)]
    seeds = row_seeds(config, None, len(ids), request.n) or [config.seed] * len(rows)
    decoding = Decoding(lm.model, [RowStart(prefix=p, gen_length=config.gen_length, seed=s, constraint=constraint)
                                   for p, s in zip(rows, seeds)], config)
    decoding.decided = decided_rows(lm, request, config)  # rows whose text is decided stop, as generate's do
    per_row = answer_length(config, request)
    start = bar.n
    while not decoding.done:
        decoding.step()
        if not bar.disable:
            with torch.inference_mode():
                done = (decoding.answer()[:, :per_row] != lm.model.mask_token_id).sum()
            bar.update(start + int(done) - bar.n)
    bar.update(start + len(rows) * per_row - bar.n)  # rows ended early count as done
    return lm.to_output(decoding.result(), rows, request)
