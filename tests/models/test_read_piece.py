"""``_read_piece``: a piece of a checkpoint tensor read with a column range (a row-parallel
rank's input features) holds exactly those columns of the piece, also for an ``inner`` piece
(a part of a tensor fused along dim 1: DiffusionGemma's experts ``gate_up_proj``), whose columns
count from the part's start. Expected values are plain slices of the whole tensor."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from safetensors.torch import load_file

from dllm.models.loading import _open_safetensors, _read_piece, read_config, safetensors_files
from dllm.models.registry import family_of, tensor_sources
from dllm.models.sources import Piece
from dllm.models.tiny import write_tiny_checkpoint


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    """A tiny DiffusionGemma checkpoint, its checkpoint files and the sources of its fused experts."""
    path = write_tiny_checkpoint(tmp_path_factory.mktemp("read-piece") / "gemma", "diffusion_gemma", seed=3)
    raw, cfg = read_config(path)
    sources = tensor_sources(family_of(raw), cfg)
    inner = {m: s.pieces[0] for m, s in sources.items() if s.pieces[0].inner is not None}
    return safetensors_files(path), inner


def _read(files, piece: Piece, cols=None) -> torch.Tensor:
    with _open_safetensors(files[piece.name]) as f:
        return _read_piece(f, files[piece.name], piece, cols)


@pytest.mark.parametrize("proj", ["gate_proj", "up_proj"])
@pytest.mark.parametrize("rows", [None, (1, 3)])
def test_inner_piece_reads_only_its_column_range(gemma, proj, rows):
    files, inner = gemma
    piece = next(p for m, p in inner.items() if m.endswith(f"moe.{proj}"))
    whole = load_file(str(files[piece.name]))[piece.name]  # (E, 2I, d): gate then up along dim 1
    part = whole[:, piece.inner[0]:piece.inner[1]]
    assert 0 < part.shape[1] < whole.shape[1]  # a part of the fused tensor, not all of it
    piece = dataclasses.replace(piece, rows=rows)
    r = slice(None) if rows is None else slice(*rows)
    torch.testing.assert_close(_read(files, piece), part[r], rtol=0, atol=0)
    lo, hi = 2, part.shape[1] - 3
    got = _read(files, piece, (lo, hi))
    assert torch.equal(got, part[r, lo:hi]), "the column range must apply inside the piece's part"


def test_column_range_of_a_plain_tensor_and_of_its_rows(gemma):
    files, _ = gemma
    name = next(n for n in files if n.endswith("self_attn.o_proj.weight"))
    whole = load_file(str(files[name]))[name]
    assert torch.equal(_read(files, Piece(name), (3, 9)), whole[:, 3:9])
    assert torch.equal(_read(files, Piece(name, rows=(2, 5)), (3, 9)), whole[2:5, 3:9])


def test_column_range_past_an_inner_part_is_refused(gemma):
    """Reading past the part would return the next fused part's columns (up after gate): refused."""
    files, inner = gemma
    piece = next(p for m, p in inner.items() if m.endswith("moe.gate_proj"))
    width = piece.inner[1] - piece.inner[0]
    with pytest.raises(ValueError, match=rf"lie outside its {width} columns"):
        _read(files, piece, (width - 2, width + 2))
