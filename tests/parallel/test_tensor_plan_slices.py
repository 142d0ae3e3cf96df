"""The tensor-parallel plan of the shared transformer, without torchrun: each rank's tensors are the
slices of the whole model's that its query heads, K/V heads, MLP units, experts and vocabulary
rows imply (derived here from grouped-query attention and the module shapes, not from the plan):
q/k/v and gate/up by output rows, o_proj and down by input columns, o_proj's bias on rank 0 alone
(the all-reduce adds it once), experts and vocabulary rows in rank order. A self-consistent
mistake (a rank computing the experts it holds, but not rank r's r-th share) decodes the same
tokens, so only the slices show it. (Tokens and logits: ``test_tensor_parallel.py``'s torchrun
jobs; DiffusionGemma's plan: ``test_gemma_tensor_plan.py``.)"""
from __future__ import annotations

import json
import re

import pytest
import torch
from safetensors.torch import save_file

from dllm.models.loading import load_model
from dllm.models.registry import FAMILIES, tensor_sources
from dllm.models.sources import to_checkpoint
from dllm.models.tiny import write_tiny_checkpoint
from dllm.parallel.tensor_plan import TensorShard


def _with_o_bias(path):
    """The tiny LLaDA2 checkpoint with ``use_bias`` on: o_proj gets a (random) bias."""
    whole = load_model(path).state_dict()
    raw = json.loads((path / "config.json").read_text())
    raw["use_bias"] = True
    (path / "config.json").write_text(json.dumps(raw))
    fam = FAMILIES["llada2_moe"]
    cfg = fam.parse_config(raw)
    g = torch.Generator().manual_seed(5)
    added = [name for name in tensor_sources(fam, cfg) if name not in whole]
    assert added and all(name.endswith("o_proj.bias") for name in added), added
    for name in added:
        whole[name] = 0.1 * torch.randn(cfg.d_model, generator=g)
    save_file(to_checkpoint(tensor_sources(fam, cfg), whole), str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


@pytest.fixture(scope="module")
def checkpoints(tiny_dirs, tmp_path_factory):
    """K/V heads as many as the ranks (LLaDA, in three shard files), half as many (Dream: split at 2,
    each read by two ranks at 4) and one (replicated); q/k/v biases (Dream); experts, a shared
    expert and o_proj's bias (LLaDA2)."""
    llada2 = write_tiny_checkpoint(tmp_path_factory.mktemp("plan-slices") / "llada2_moe", "llada2_moe", seed=2,
                                   n_kv_heads=1)
    return [tiny_dirs["llada_sharded"], tiny_dirs["dream"], _with_o_bias(llada2)]


def _expected(name: str, whole: torch.Tensor, cfg, rank: int, size: int) -> torch.Tensor:
    """The part of the whole model's tensor ``name`` rank ``rank`` of ``size`` must hold."""
    if name in ("embed.weight", "lm_head.weight"):
        rows = cfg.vocab_size // size
        return whole[rank * rows:(rank + 1) * rows]
    m = re.fullmatch(r"layers\.\d+\.(.+)", name)
    rest = m[1] if m else ""
    if m is None or re.search(r"(norm\.weight|router\.weight|expert_bias)$", rest):
        return whole  # norms, the router and its selection bias: every rank
    heads = cfg.n_heads // size
    q_lo, q_hi = rank * heads, (rank + 1) * heads  # the rank's query heads
    group = cfg.n_heads // cfg.n_kv_heads  # query heads per K/V head
    kv_lo, kv_hi = q_lo // group, (q_hi - 1) // group + 1  # the K/V heads those queries read
    d = cfg.head_dim
    if rest.startswith("attn.q_proj."):
        return whole[q_lo * d:q_hi * d]
    if rest.startswith(("attn.k_proj.", "attn.v_proj.")):
        return whole[kv_lo * d:kv_hi * d]
    if rest == "attn.o_proj.weight":
        return whole[:, q_lo * d:q_hi * d]
    if rest == "attn.o_proj.bias":  # added once: by rank 0, the others' partial sums hold none
        return whole if rank == 0 else torch.zeros_like(whole)
    if whole.dim() == 3:  # stacked experts (E, ...): the rank's E / size in rank order
        experts = cfg.moe.n_experts // size
        return whole[rank * experts:(rank + 1) * experts]
    hidden = cfg.moe.shared_hidden if ".shared." in rest else cfg.mlp_hidden_size
    units = hidden // size
    if rest.endswith(("gate_proj.weight", "up_proj.weight")):
        return whole[rank * units:(rank + 1) * units]
    if rest.endswith("down_proj.weight"):
        return whole[:, rank * units:(rank + 1) * units]
    raise AssertionError(f"no expectation for {name}")


@pytest.mark.parametrize("size", [2, 4])
def test_each_rank_holds_its_slices(checkpoints, size):
    for path in checkpoints:
        whole = load_model(path)
        cfg, full_state = whole.config, whole.state_dict()
        assert any(name.endswith("o_proj.bias") for name in full_state) or "llada2" not in str(path)
        for rank in range(size):
            model = load_model(path, tensor_parallel=TensorShard(rank=rank, size=size))  # reads only
            state = model.state_dict()
            assert state.keys() == full_state.keys()
            for name, tensor in state.items():
                assert torch.equal(tensor, _expected(name, full_state[name], cfg, rank, size)), (path.name, name, rank)
