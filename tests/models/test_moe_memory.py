"""The memory plan of an MoE model: the weights count every expert, the activations count the
routed token copies, the plan bounds a decode's measured peak, and ``memory_budget_mb`` refuses
what does not fit because of them."""
from __future__ import annotations

import pytest

import dllm
from dllm.engine import memory
from dllm.engine.config import GenerationConfig
from dllm.engine.memory import ForwardShape, MemoryBudgetError, activation_bytes, model_bytes, moe_token_bytes
from dllm.models.moe import MoEMLP
from dllm.models.tiny import write_tiny_checkpoint

PROMPTS = [[5, 6, 7, 8, 9], [10, 11, 12]]
# wide experts, so the MoE layer's routed copies are the largest phase of a layer (by far: a plan
# without them falls below the measured peak of the decode below, 10 MB against 53 MB)
WIDE = dict(d_model=64, n_layers=2, n_heads=4, mlp_hidden=64, n_experts=16, top_k=8, expert_hidden=1024,
            max_len=1 << 14)


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("moe") / "llada2", "llada2_moe", seed=5, **WIDE)


@pytest.fixture(scope="module")
def moe_lm(moe_dir):
    return dllm.load(moe_dir, device="cpu", dtype="float32")


def test_model_bytes_count_every_expert(moe_lm):
    model = moe_lm.model
    layers = [m for m in model.modules() if isinstance(m, MoEMLP)]
    assert len(layers) == 1  # LLaDA2: layer 0 dense
    E, I, d = WIDE["n_experts"], WIDE["expert_hidden"], WIDE["d_model"]
    moe_params = E * d + E + 3 * E * I * d + 3 * I * d  # router, bias, experts, one shared expert of I
    mine = list(layers[0].parameters()) + list(layers[0].buffers())
    assert sum(t.numel() for t in mine) == moe_params
    rest = sum(t.numel() for t in list(model.parameters()) + list(model.buffers()) if all(t is not m for m in mine))
    assert model_bytes(model) == 4 * (moe_params + rest)


def test_activations_count_the_routed_copies(moe_lm):
    model = moe_lm.model
    layer = next(m for m in model.modules() if isinstance(m, MoEMLP))
    k, I, d = WIDE["top_k"], WIDE["expert_hidden"], WIDE["d_model"]
    assert moe_token_bytes(layer, 4) >= k * (2 * I + d) * 4
    shape = ForwardShape(rows=2, queries=40, keys=40)
    with_moe = activation_bytes(model, shape)
    assert with_moe >= 2 * 40 * k * (2 * I + d) * 4
    original = layer.cfg
    layer.cfg = type(original)(n_experts=8, top_k=1, expert_hidden=8)  # narrow: the dense phases dominate
    try:
        assert activation_bytes(model, shape) < with_moe
    finally:
        layer.cfg = original


def test_plan_bounds_the_measured_peak_of_an_moe_decode(moe_dir):
    peak_memory = pytest.importorskip("dllm.bench.peak_memory")
    try:
        peak_memory.peak_rss_rise(lambda: None)
    except OSError:
        pytest.skip("peak resident memory cannot be measured here")
    # blocks of 256 decoded as the model's 16 blocks of 32, one step each (model_block_windows)
    config = GenerationConfig(gen_length=512, block_length=256, steps=16)
    (row,) = peak_memory.measure_in_subprocess(str(moe_dir), PROMPTS, [config])
    assert 0 < row["measured_bytes"] <= row["planned_decode_bytes"], row


def test_budget_refuses_a_canvas_whose_expert_copies_do_not_fit(moe_lm, monkeypatch):
    config = GenerationConfig(gen_length=64, steps=8)
    fitting = moe_lm.generate_ids(PROMPTS, config)
    budget = fitting.memory["total_bytes"] / (1 << 20)
    monkeypatch.setattr(memory, "moe_token_bytes", lambda layer, itemsize: 0)  # a plan that forgot them
    forgetful = memory.plan_memory(moe_lm.model, 2, 69, config)
    assert forgetful.total_bytes < fitting.memory["total_bytes"]
    monkeypatch.undo()
    squeezed = GenerationConfig(gen_length=64, steps=8, memory_budget_mb=(forgetful.total_bytes + 1) / (1 << 20))
    with pytest.raises(MemoryBudgetError, match="activations"):
        moe_lm.generate_ids(PROMPTS, squeezed)
    assert budget > squeezed.memory_budget_mb
