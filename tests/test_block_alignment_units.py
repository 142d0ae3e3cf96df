"""block_alignment's arithmetic on a stand-in model (only ``attention`` and ``config`` are read):
the unit a row's engine prompt is cut to, each row's lead, answer span and answer offset, and
the window a block-causal model runs, with the field it replaces and the steps it needs (the
pipelined mode keeps its own)."""
from types import SimpleNamespace

import pytest

from dllm import GenerationConfig
from dllm.engine.block_alignment import align_rows, alignment_unit, model_block_windows
from dllm.engine.decoding import RowStart


def _model(attention="block_causal", origin="absolute", size=8):
    return SimpleNamespace(attention=attention, config=SimpleNamespace(block_size=size, block_origin=origin))


def test_the_unit_holds_whole_decode_and_model_blocks_counted_from_position_0():
    config = GenerationConfig(gen_length=24, block_length=12, steps=24)
    assert alignment_unit(_model(), config) == 24  # lcm(12, 8)
    assert alignment_unit(_model(origin="answer"), config) == 0  # its blocks start at the answer
    assert alignment_unit(_model(attention="bidirectional"), config) == 0


def test_a_rows_tail_leads_its_answer_whose_span_grows_to_whole_blocks():
    rows = [RowStart(prefix=list(range(11)), gen_length=6, answer_offset=3), RowStart(prefix=list(range(8)), gen_length=6)]
    aligned = align_rows(rows, unit=8, block_length=4)
    assert aligned.leads == [3, 0] and aligned.wanted == [6, 6]
    assert [len(r.prefix) for r in aligned.rows] == [8, 8]
    assert [r.gen_length for r in aligned.rows] == [12, 8]  # 3 + 6 in blocks of 4; 6 in blocks of 4
    assert [r.answer_offset for r in aligned.rows] == [0, 0]  # the lead's positions come off the offset


def test_a_crossing_window_becomes_the_gcd_and_needs_steps_for_every_window():
    """Windows of 12 cross blocks of 8: windows of 4, six over 24 positions, so 6 steps suffice
    and 8 do not divide among them."""
    plain = model_block_windows(_model(), GenerationConfig(gen_length=24, block_length=12, steps=6))
    assert (plain.block_length, plain.sub_block_length, plain.steps) == (4, None, 6)
    sub = model_block_windows(_model(), GenerationConfig(gen_length=24, block_length=24, sub_block_length=12, steps=6))
    assert (sub.block_length, sub.sub_block_length) == (24, 4)  # the sub-block is the window
    with pytest.raises(ValueError, match="use a multiple of 6"):
        model_block_windows(_model(), GenerationConfig(gen_length=24, block_length=12, steps=8))
    pipelined = GenerationConfig(gen_length=24, block_length=12, steps=8, block_add_threshold=0.5)
    assert model_block_windows(_model(), pipelined) is pipelined  # the pipeline moves model blocks itself
