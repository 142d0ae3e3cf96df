"""What each Triton launcher hands its kernel, checked without running it: the schedule (tiles,
chunks, K steps) is a function of the dtype and a row's own shape, never of the row count, and
float32 products run in IEEE precision (not TF32), the batch-invariance claims of issue 39 that
the interpreter cannot see: it runs ``tl.dot`` in full precision whatever the flag, and a tile
chosen by the row count would only show on a GPU where that tile rounds otherwise. The sampling
kernels launch without FMA fusion, so the noised scores round as torch rounds them.

Each launcher runs on CPU tensors with its kernel replaced by a recorder (and the interpreter
check answered yes), so this needs triton importable but no interpreter run.
"""
from __future__ import annotations

import importlib

import pytest
import torch

pytest.importorskip("triton", reason="the launchers need triton (the test and gpu extras)")

cs = importlib.import_module("dllm.kernels.confidence_stats")
gm = importlib.import_module("dllm.kernels.grouped_matmul")
ia = importlib.import_module("dllm.kernels.invariant_attention")
im = importlib.import_module("dllm.kernels.invariant_matmul")
ls = importlib.import_module("dllm.kernels.log_softmax")
rn = importlib.import_module("dllm.kernels.rms_norm")
ss = importlib.import_module("dllm.kernels.shard_stats")


class _Recorder:
    """Stands in for a ``@triton.jit`` kernel: ``kernel[grid](*args, **kwargs)`` records the call."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple, dict]] = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((grid, kwargs))

    def last(self) -> dict:
        return self.calls[-1][1]


@pytest.fixture()
def launches(monkeypatch):
    """Every kernel replaced by a recorder; the launchers' device checks see an interpreter."""
    recorders = {}
    for mod, name in ((cs, "_confidence_stats_kernel"), (gm, "_grouped_matmul_kernel"),
                      (ia, "_invariant_attention_kernel"), (im, "_invariant_linear_kernel"),
                      (ls, "_log_softmax_kernel"), (rn, "_rms_norm_kernel"), (ss, "_shard_stats_kernel")):
        recorders[name] = _Recorder()
        monkeypatch.setattr(mod, name, recorders[name])
        if hasattr(mod, "triton_interpreted"):
            monkeypatch.setattr(mod, "triton_interpreted", lambda: True)
    return recorders


def _schedules(launch, recorder, make, rows=(1, 2, 7, 33, 300)) -> list[dict]:
    """The keyword arguments (the compile-time schedule) of one launch per row count."""
    for n in rows:
        launch(make(n))
    return [kwargs for _, kwargs in recorder.calls[-len(rows):]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_row_wise_kernels_keep_one_schedule_at_any_row_count(launches, dtype):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(70, 100, generator=g).to(dtype)
    nw = torch.randn(1100, generator=g).to(dtype)  # D = 1100: more than one chunk of MAX_BLOCK_D
    cases = {
        "_invariant_linear_kernel": (lambda x: im.invariant_linear_triton(x, w), lambda n: torch.randn(n, 100).to(dtype)),
        "_rms_norm_kernel": (lambda x: rn.rms_norm_triton(x, nw, 1e-6), lambda n: torch.randn(n, 1100).to(dtype)),
        "_log_softmax_kernel": (ls.log_softmax_triton, lambda n: torch.randn(n, 5000).to(dtype)),
    }
    for name, (launch, make) in cases.items():
        schedules = _schedules(launch, launches[name], make)
        assert all(s == schedules[0] for s in schedules), (name, schedules)
    linear = launches["_invariant_linear_kernel"].last()
    assert linear["IEEE"] is (dtype == torch.float32)  # TF32 would round float32 products by the tile
    assert (linear["BLOCK_M"], linear["BLOCK_N"], linear["BLOCK_K"]) == (im.BLOCK_M, im.BLOCK_N, im.BLOCK_K[dtype])


def test_attention_keeps_one_schedule_at_any_batch_and_padding(launches):
    H, D, L = 2, 16, 21

    def make(n):  # n rows, left-padded to a width that grows with the batch
        width = L + n % 5
        valid = torch.ones(n, width, dtype=torch.bool)
        valid[:, : n % 4] = False
        return torch.randn(n, H, width, D), torch.randn(n, 1, width, D), valid

    def launch(args):
        q, k, valid = args
        ia.invariant_attention_triton(q, k, k, None if q.shape[0] == 1 else valid, q.shape[2])

    schedules = _schedules(launch, launches["_invariant_attention_kernel"], make)
    fixed = [{k: v for k, v in s.items() if k != "HAS_VALID"} for s in schedules]  # the mask's presence aside
    assert all(s == fixed[0] for s in fixed), fixed
    assert fixed[0]["IEEE"] is True and (fixed[0]["BLOCK_M"], fixed[0]["BLOCK_N"]) == (ia.BLOCK_M, ia.BLOCK_N)


def test_grouped_product_keeps_its_k_steps_and_a_pinned_row_tile(launches):
    """The K tile is the dtype's whatever the rows; a pinned row tile (batch-invariant mode) is
    the tile at every row count; float32 in IEEE precision."""
    w = torch.randn(3, 70, 100)

    def make(n):
        return torch.randn(n, 100), torch.tensor([0, n // 3, n - n // 3, n])

    for tile in (None, 16):
        schedules = _schedules(lambda a: gm.grouped_matmul_triton(*a[:1], w, a[1], block_m=tile),
                               launches["_grouped_matmul_kernel"], make)
        assert {s["BLOCK_K"] for s in schedules} == {32} and all(s["IEEE"] is True for s in schedules)
        if tile is not None:
            assert {s["BLOCK_M"] for s in schedules} == {tile}


def test_sampling_kernels_launch_without_fma_fusion(launches):
    """x + T * g fused into one FMA would round once where torch rounds twice: another sample."""
    logits = torch.randn(3, 500)
    cs.confidence_stats_triton(logits, temperature=0.7, seed=1)
    ss.shard_stats_triton(logits, vocab_start=500, temperature=0.7, seed=1, global_max=logits.amax(-1))
    for name in ("_confidence_stats_kernel", "_shard_stats_kernel"):
        assert launches[name].last()["enable_fp_fusion"] is False, name
