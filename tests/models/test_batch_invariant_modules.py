"""``load(batch_invariant=True)`` (issue 39): what it swaps, what it refuses, and its plumbing.

The kernels' bitwise row invariance is tests/kernels/test_batch_invariant.py's; here the model
transform keeps the parameters and the logits (through the torch references on the CPU), the CPU
load accepts the option and changes nothing, CUDA-only refusals name their fix (checked with a
``cuda`` device object, no GPU needed), and every model-loading command passes the flag on.
"""
from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

import dllm
from dllm.kernels import CALL_COUNTS
from dllm.models.batch_invariant import (InvariantLinear, InvariantRMSNorm, check_batch_invariant,
                                         make_batch_invariant)
from dllm.models.layers import RMSNorm
from dllm.validation import OptionTypeError

CPU = dict(device="cpu", dtype="float32")


def test_swapped_model_keeps_parameters_ties_and_logits(tiny_dirs, caplog):
    plain = dllm.load(tiny_dirs["llada"], **CPU).model
    model = dllm.load(tiny_dirs["llada"], **CPU).model
    keys = {k: v for k, v in model.state_dict().items()}
    with caplog.at_level(logging.WARNING, logger="dllm.models.batch_invariant"):
        counts = make_batch_invariant(model)
    assert "not yet measured on a GPU" in caplog.text  # what is not covered is said, not hidden
    assert not any(type(m) in (nn.Linear, RMSNorm) for m in model.modules())
    assert counts["linear"] == sum(isinstance(m, InvariantLinear) for m in model.modules())
    assert counts["rms_norm"] == sum(isinstance(m, InvariantRMSNorm) for m in model.modules())
    assert counts["linear"] == sum(type(m) is nn.Linear for m in plain.modules()) and counts["rms_norm"] > 0
    assert counts["attention"] == len(model.layers) and all(
        layer.attn.attention_kernel is not None for layer in model.layers)
    assert model.state_dict().keys() == keys.keys()
    assert all(model.state_dict()[k] is v or torch.equal(model.state_dict()[k], v) for k, v in keys.items())
    ids = torch.randint(0, 100, (3, 12))
    pos = torch.arange(12).expand(3, -1)
    before = dict(CALL_COUNTS)
    with torch.no_grad():
        torch.testing.assert_close(model(ids, pos), plain(ids, pos), rtol=1e-4, atol=1e-4)
    for name in ("invariant_linear", "rms_norm", "invariant_attention"):  # the forward went through each
        assert CALL_COUNTS[name] > before.get(name, 0), name
    tied = nn.Module()
    tied.embed = nn.Embedding(10, 4)
    tied.head = nn.Linear(4, 10, bias=False)
    tied.head.weight = tied.embed.weight
    assert make_batch_invariant(tied)["linear"] == 1 and tied.head.weight is tied.embed.weight


def test_cpu_load_accepts_the_option_and_changes_nothing(tiny_dirs, caplog):
    with caplog.at_level(logging.INFO, logger="dllm.models.batch_invariant"):
        lm = dllm.load(tiny_dirs["llada"], batch_invariant=True, **CPU)
    assert "nothing to replace" in caplog.text
    assert not any(isinstance(m, (InvariantLinear, InvariantRMSNorm)) for m in lm.model.modules())
    with pytest.raises(OptionTypeError, match="batch_invariant must be True or False"):
        dllm.load(tiny_dirs["llada"], batch_invariant="yes", **CPU)


def test_cuda_refusals_name_the_fix(monkeypatch):
    cuda = torch.device("cuda")
    with pytest.raises(ValueError, match="quantize"):
        check_batch_invariant(True, cuda, quantize="int8")
    monkeypatch.setenv("DLLM_KERNELS", "torch")
    with pytest.raises(ValueError, match="DLLM_KERNELS"):
        check_batch_invariant(True, cuda)
    assert check_batch_invariant(False, cuda) is False
    assert check_batch_invariant(True, torch.device("cpu"), quantize="int8") is False
    pytest.importorskip("triton")
    monkeypatch.setenv("DLLM_KERNELS", "auto")
    assert check_batch_invariant(True, cuda) is True


def test_every_model_loading_command_takes_the_flag_and_load_from_args_passes_it(monkeypatch):
    from dllm.cli import build_parser
    from dllm.cli.options import load_from_args

    parser = build_parser()
    commands = [["generate", "x"], ["chat"], ["serve"], ["train-filter", "--out", "o"],
                ["bench", "parallelbench", "--out", "o"], ["bench", "throughput", "--prompts", "p", "--out", "o"],
                ["bench", "serve", "--out", "o"]]
    for argv in commands:
        assert parser.parse_args([*argv, "--batch-invariant"]).batch_invariant is True, argv
        assert parser.parse_args(argv).batch_invariant is False, argv
    seen = {}
    monkeypatch.setattr(dllm, "load", lambda *a, **kw: seen.update(kw))
    load_from_args(parser.parse_args(["generate", "x", "--batch-invariant"]))
    assert seen["batch_invariant"] is True
    from dllm.bench.serve_load import invariant_args

    # the load benchmark starts its own server: the flag reaches that command line too
    assert invariant_args(parser.parse_args(["bench", "serve", "--out", "o", "--batch-invariant"])) == [
        "--batch-invariant"]
    assert invariant_args(parser.parse_args(["bench", "serve", "--out", "o"])) == []


def test_swapped_bundled_model_decodes_ragged_batches_as_single_rows():
    """The bundled model with its modules swapped (the kernels' torch references on the CPU): a
    ragged batch gives each row its batch-1 tokens through the uncached, dual and adaptive caches
    (the adaptive cache's partial layers call Attention.attend too), and those are the unswapped
    model's tokens."""
    from dllm import GenerationConfig
    from dllm.engine.decoding import decode

    lm, plain = dllm.load(**CPU), dllm.load(**CPU)
    make_batch_invariant(lm.model)
    prompts = [lm.encode(p) for p in ("Sort: Lee, Ann, Bo", "Reverse the list: Kim Ray Sue Tom Ada Eve Max",
                                      "Copy: Zoe")]
    before = CALL_COUNTS["invariant_attention"]
    for cache in ("none", "dual", "adaptive"):
        cfg = GenerationConfig(gen_length=32, block_length=8, steps=32, stop_at_eos=False, cache=cache)
        batch = decode(lm.model, prompts, cfg).answer.tolist()
        assert batch == [decode(lm.model, [p], cfg).answer[0].tolist() for p in prompts], cache
        assert batch == decode(plain.model, prompts, cfg).answer.tolist(), cache
    assert CALL_COUNTS["invariant_attention"] > before


def test_moe_grouped_products_take_a_pinned_row_tile_under_the_option(monkeypatch):
    """The Triton grouped product sizes its row tile from the rows per expert, and a bigger tile
    can mean another MMA instruction on a GPU; under the option every MoE layer pins it, whatever
    the batch (both the one-process and the expert-parallel path call the same product)."""
    import dllm.kernels as kernels_mod
    import dllm.models.moe as moe
    from dllm.kernels.grouped_matmul import grouped_matmul_torch
    from dllm.models.batch_invariant import INVARIANT_ROW_TILE
    from dllm.models.config import MoEConfig

    tiles = []

    def spy(x, w, offsets, *, row_tile=None):
        tiles.append(row_tile)
        return grouped_matmul_torch(x, w, offsets)

    monkeypatch.setattr(moe, "grouped_matmul", spy)
    holder = nn.Module()
    holder.mlp = moe.MoEMLP(32, MoEConfig(n_experts=8, top_k=2, expert_hidden=16))
    for rows in (1, 40):
        holder.mlp(torch.randn(rows, 32))
    assert tiles == [None] * 6  # the kernel's own choice by default
    assert make_batch_invariant(holder)["moe"] == 1
    tiles.clear()
    for rows in (1, 40):
        holder.mlp(torch.randn(rows, 32))
    assert tiles == [INVARIANT_ROW_TILE] * 6
    tiles.clear()
    x = torch.randn(40, 32)
    holder.mlp._routed_here(x, x)  # the expert-parallel share (this rank: every expert)
    assert tiles == [INVARIANT_ROW_TILE] * 3
    # the dispatch point hands the tile to the Triton kernel as its block_m
    seen = {}
    monkeypatch.setattr(kernels_mod, "kernel_backend", lambda device=None: "triton")
    monkeypatch.setattr(kernels_mod._gm, "grouped_matmul_triton",
                        lambda x, w, offsets, block_m=None: seen.setdefault("block_m", block_m))
    kernels_mod.grouped_matmul(torch.randn(2, 4), torch.randn(1, 3, 4), torch.tensor([0, 2]), row_tile=16)
    assert seen == {"block_m": 16}
