"""Block partitions counted from position 0, as block-diffusion models are trained and decoded.

Fast-dLLM v2, LLaDA2 and SDAR count their blocks over absolute positions of prompt + answer: a
prompt that ends mid-block shares its last block with the first answer tokens, which are decoded
inside that block (attending to the prompt tail bidirectionally), and the last block runs past
the requested length, whose answer is then cut there. The engine counts its windows from the
canvas answer start, so each row enters it *aligned*: its prefix up to the last whole
alignment unit is the engine's prompt, the rest (the row's *lead*) sits at the start of the
answer region as already decided tokens, and the row's answer region is the whole blocks that
hold lead + requested length. Every row of a ragged batch then has its block boundaries on the
same canvas columns, so windows, caches and the block-causal spans stay shared; ``lead`` and
``wanted`` (the requested length) let the engine hand back each row's answer from its true
start, cut at its length.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from dllm.engine.config import GenerationConfig


@dataclass(frozen=True, slots=True)
class AlignedRows:
    """Rows as the engine decodes them, with each row's lead and requested answer length."""

    rows: list  # list[RowStart]: prefixes cut to whole units, gen_length in whole blocks
    leads: list[int]  # answer-region positions before each row's answer (its prompt tail)
    wanted: list[int]  # answer positions each row asked for


def model_block_windows(model, config: GenerationConfig) -> GenerationConfig:
    """The decode config a block-causal model runs: decision windows that never cross one of its
    blocks.

    No position of a block-causal model sees a later model block, and a later block reads the
    earlier ones as they stand, so a window spanning a block boundary would commit tokens of the
    later block while the end of the earlier one is still masks, an order no released decoder
    uses (Fast-dLLM v2 decodes its bd_size blocks and their sub-blocks, LLaDA2 and SDAR build the
    mask from the decode block). A window that does not divide the model's block becomes their
    greatest common divisor (a multiple of the block: the block itself), as block_length, or as
    sub_block_length when that was set; the answer length and the steps per token stay. Windows
    start on block boundaries (the engine counts both from the answer start, aligned rows for
    blocks counted from position 0). Bidirectional models and the pipelined mode (which moves
    model blocks itself) are unchanged."""
    window = block_causal_window(model, config.window_length)
    if config.block_add_threshold is not None or window == config.window_length:
        return config
    field = "sub_block_length" if config.sub_block_length is not None else "block_length"
    windows = config.gen_length // window
    if config.steps % windows:
        raise ValueError(f"steps={config.steps}: this block-causal model decodes its blocks of "
                         f"{model.config.block_size} one after the other, in {windows} windows of {window} here "
                         f"({field} {config.window_length} crosses its blocks); use a multiple of {windows}, "
                         f"e.g. steps={windows * max(1, config.steps // windows)}")
    return dataclasses.replace(config, **{field: window})


def block_causal_window(model, window: int) -> int:
    """The decision window ``model`` runs for a requested ``window`` (model_block_windows): the
    window itself unless the model is block-causal and the window does not divide its block,
    then their greatest common divisor."""
    size = model.config.block_size
    if model.attention != "block_causal" or size % window == 0:
        return window
    return math.gcd(window, size)


def alignment_unit(model, config: GenerationConfig) -> int:
    """Positions a row's engine prompt must be a multiple of: 0 when the model's blocks start at
    the answer (bidirectional models; block-causal ones trained that way)."""
    cfg = model.config
    if model.attention != "block_causal" or cfg.block_origin != "absolute":
        return 0
    return math.lcm(config.block_length, cfg.block_size)


def align_rows(rows: list, unit: int, block_length: int) -> AlignedRows:
    """Split each row's prefix at its last multiple of ``unit``; the tail leads its answer region,
    which grows to whole blocks holding tail + gen_length. Rows already aligned are unchanged."""
    aligned, leads, wanted = [], [], []
    for row in rows:
        lead = len(row.prefix) % unit if unit else 0  # a prompt under one unit is all lead
        span = math.ceil((lead + row.gen_length) / block_length) * block_length
        aligned.append(dataclasses.replace(row, prefix=row.prefix[: len(row.prefix) - lead], gen_length=span,
                                           answer_offset=row.answer_offset - lead))
        leads.append(lead)
        wanted.append(row.gen_length)
    return AlignedRows(aligned, leads, wanted)


def tail_tokens(row, lead: int) -> list[int]:
    """The prompt tail a row's lead holds (the original prefix's last ``lead`` tokens)."""
    return list(row.prefix[len(row.prefix) - lead:]) if lead else []
