"""DiffusionGemma's tensor-parallel plan, without torchrun: each rank's tensors are the slices of
the whole model's that its query heads, K/V heads, hidden units and experts imply (derived here
from grouped-query attention, not from the plan), the vocabulary and self-conditioning whole;
sizes that do not fit are refused naming what they do not divide, before any weight is read.
(Tokens and logits at 2 and 4 ranks: ``test_tensor_parallel.py``'s torchrun jobs.)"""
from __future__ import annotations

import dataclasses
import re

import pytest
import torch

import dllm
from dllm.models.loading import load_model, read_config
from dllm.models.tiny import write_tiny_checkpoint
from dllm.parallel.tensor_plan import TensorPlanError, TensorShard, check_plan


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    """Two layers: sliding (head size 16, 2 K/V heads) and full (head size 32, 1 K/V head, no v_proj)."""
    path = write_tiny_checkpoint(tmp_path_factory.mktemp("gemma-plan") / "gemma", "diffusion_gemma", seed=4,
                                 num_shards=2)
    return path, load_model(path)


def _expected(name: str, whole: torch.Tensor, cfg, rank: int, size: int) -> torch.Tensor:
    """The part of the whole model's tensor ``name`` rank ``rank`` of ``size`` must hold."""
    m = re.fullmatch(r"layers\.(\d+)\.(.+)", name)
    rest = m[2] if m else ""
    if m is None or re.search(r"(norm(_\d)?\.weight|scale|scalar|router\.weight)$", rest):
        return whole  # embedding, LM head, self-conditioning, norms, router, scales: every rank
    head_dim, n_kv = cfg.layer_heads(int(m[1]))
    heads = cfg.n_heads // size
    q_lo, q_hi = rank * heads, (rank + 1) * heads  # the rank's query heads
    group = cfg.n_heads // n_kv  # query heads per K/V head
    kv_lo, kv_hi = q_lo // group, (q_hi - 1) // group + 1  # the K/V heads those queries read
    if rest == "self_attn.q_proj.weight":
        return whole[q_lo * head_dim:q_hi * head_dim]
    if rest in ("self_attn.k_proj.weight", "self_attn.v_proj.weight"):
        return whole[kv_lo * head_dim:kv_hi * head_dim]
    if rest == "self_attn.o_proj.weight":
        return whole[:, q_lo * head_dim:q_hi * head_dim]
    units = cfg.mlp_hidden_size // size
    if rest in ("mlp.gate_proj.weight", "mlp.up_proj.weight"):
        return whole[rank * units:(rank + 1) * units]
    if rest == "mlp.down_proj.weight":
        return whole[:, rank * units:(rank + 1) * units]
    experts = cfg.moe.n_experts // size
    if rest in ("moe.gate_proj", "moe.up_proj", "moe.down_proj"):
        return whole[rank * experts:(rank + 1) * experts]
    raise AssertionError(f"no expectation for {name}")


@pytest.mark.parametrize("size", [2, 4])
def test_each_rank_holds_its_slices(gemma, size):
    """At 2 ranks the sliding layer's 2 K/V heads are split; at 4 each is read by two ranks, and
    the full layer's one K/V head is on every rank. The rank's encoder K/V store and memory plan
    hold its heads only."""
    path, whole = gemma
    cfg = whole.config
    full_state = whole.state_dict()
    for rank in range(size):
        model = load_model(path, tensor_parallel=TensorShard(rank=rank, size=size))  # reads only; no collective
        state = model.state_dict()
        assert state.keys() == full_state.keys()
        for name, tensor in state.items():
            assert torch.equal(tensor, _expected(name, full_state[name], cfg, rank, size)), (name, rank)
        assert model.tensor_parallel is None and model.tensor_shard.rank == rank  # the logits are whole rows
        local_kv = [(cfg.layer_heads(i)[0], 1 if size > cfg.layer_heads(i)[1] else cfg.layer_heads(i)[1] // size)
                    for i in range(cfg.n_layers)]
        assert model.kv_cache_bytes(3, 10) == sum(2 * 3 * kv * 10 * dim * 4 for dim, kv in local_kv)
        assert model.kv_cache_bytes(3, 10) < whole.kv_cache_bytes(3, 10)


def test_sizes_that_do_not_fit_are_refused_naming_them(gemma, monkeypatch):
    import dllm.api.model

    def no_read(*_a, **_k):
        raise AssertionError("weights were read")

    monkeypatch.setattr(dllm.api.model, "load_model", no_read)
    path, _ = gemma
    with pytest.raises(TensorPlanError) as err:
        dllm.load(path, tensor_parallel=3)
    for named in ("4 attention heads", "2 K/V heads of the sliding-attention layers", "MLP hidden size 128",
                  "4 experts"):
        assert named in str(err.value)
    assert "full-attention" not in str(err.value)  # its one K/V head is replicated on 3 ranks
    cfg = read_config(path)[1]
    check_plan(dataclasses.replace(cfg, vocab_size=301), 2)  # the vocabulary is not split: any size fits it
    wide = dataclasses.replace(cfg, n_heads=6, n_kv_heads=2, global_kv_heads=3, mlp_hidden_size=96)
    with pytest.raises(TensorPlanError, match=r"does not divide this diffusion_gemma model's 3 K/V heads of "
                                              r"the full-attention layers \(") as err:
        check_plan(wide, 2)
    assert "sliding" not in str(err.value) and "attention heads" not in str(err.value)
