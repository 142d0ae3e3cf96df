"""grouped_matmul: the torch reference equals plain per-expert products and keeps a row's bits
whatever its expert's row count, the Triton kernel equals the reference (under TRITON_INTERPRET=1
on CPU in a subprocess, natively when a GPU is present), and the dispatch picks, counts and
refuses as documented. The kernel check runs this file as a script in a fresh interpreter (see
``kernel_subprocess``) and refuses to pass unless the Triton path really ran.
"""
from __future__ import annotations

import importlib
import sys

import pytest
import torch

import dllm.kernels as kernels
from dllm.kernels import CALL_COUNTS, kernel_backend
from tests.kernels.kernel_subprocess import NO_TRITON, run_kernel_check, skip_interpreted

# the module (the package attribute of that name is the dispatch function)
gm = importlib.import_module("dllm.kernels.grouped_matmul")
cs = importlib.import_module("dllm.kernels.confidence_stats")  # the launchers' triton checks


# rows per expert: empty experts, one expert taking every row, N not a multiple of any tile,
# a single row, every expert one row, no rows at all
COUNTS = [[3, 0, 17, 1, 20], [0, 0, 41, 0], [1], [1] * 20, [0, 0, 0], [70, 0, 2, 33]]


def _case(counts: list[int], K: int, N_out: int, dtype: torch.dtype, device: str, g: torch.Generator):
    E, N = len(counts), sum(counts)
    x = torch.randn(N, K, generator=g).to(dtype).to(device)
    w = (torch.randn(E, N_out, K, generator=g) / K**0.5).to(dtype).to(device)
    offsets = torch.tensor([0] + torch.tensor(counts).cumsum(0).tolist(), device=device)
    return x, w, offsets


def _per_expert(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Straightforward: one float64 product per expert."""
    b = offsets.tolist()
    y = torch.zeros(x.shape[0], w.shape[1], dtype=torch.float64)
    for e in range(w.shape[0]):
        y[b[e]:b[e + 1]] = x[b[e]:b[e + 1]].double() @ w[e].double().T
    return y


@pytest.mark.parametrize("counts", COUNTS)
def test_reference_equals_per_expert_products(counts):
    x, w, offsets = _case(counts, 40, 72, torch.float32, "cpu", torch.Generator().manual_seed(1))
    y = gm.grouped_matmul_torch(x, w, offsets)
    assert y.shape == (sum(counts), 72) and y.dtype == torch.float32
    torch.testing.assert_close(y.double(), _per_expert(x, w, offsets), rtol=1e-5, atol=1e-5)


def test_reference_row_bits_do_not_depend_on_the_group_size():
    """A row's output is the same bits whether its expert got 1, 5 or 90 rows and wherever the
    row sits in the group: the batch invariance ragged batches rely on."""
    g = torch.Generator().manual_seed(2)
    K, N_out = 64, 96
    w = torch.randn(3, N_out, K, generator=g)
    row = torch.randn(1, K, generator=g)
    want = gm.grouped_matmul_torch(row, w[1:2], torch.tensor([0, 1]))[0]
    for before, after in [(0, 0), (4, 0), (0, 7), (30, 59), (11, 2)]:
        x = torch.cat([torch.randn(before, K, generator=g), row, torch.randn(after, K, generator=g)])
        n = x.shape[0]
        for offsets in ([0, 0, n, n], [0, before, n, n], [0, before, before + 1, n]):  # expert 1 holds it
            y = gm.grouped_matmul_torch(x, w, torch.tensor(offsets))
            assert torch.equal(y[before], want), (before, after, offsets)


def test_reference_checks_its_inputs():
    x, w = torch.randn(5, 8), torch.randn(2, 4, 8)
    with pytest.raises(ValueError, match="offsets must have shape"):
        gm.grouped_matmul_torch(x, w, torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="rise from 0 to N=5"):
        gm.grouped_matmul_torch(x, w, torch.tensor([0, 4, 3]))
    with pytest.raises(ValueError, match="rise from 0 to N=5"):
        gm.grouped_matmul_torch(x, w, torch.tensor([0, 2, 4]))
    with pytest.raises(ValueError, match="K=6"):
        gm.grouped_matmul_torch(torch.randn(5, 6), w, torch.tensor([0, 2, 5]))
    with pytest.raises(ValueError, match="share a float dtype"):
        gm.grouped_matmul_torch(x.double(), w, torch.tensor([0, 2, 5]))
    with pytest.raises(ValueError, match="int32 or int64"):
        gm.grouped_matmul_torch(x, w, torch.tensor([0.0, 2.0, 5.0]))


# ------------------------------------------------------------------------------------------
# Dispatch
# ------------------------------------------------------------------------------------------


def test_dispatch_auto_uses_torch_on_cpu_and_counts(monkeypatch):
    monkeypatch.setenv("DLLM_KERNELS", "auto")
    before = dict(CALL_COUNTS)
    x, w, offsets = _case([2, 3], 8, 4, torch.float32, "cpu", torch.Generator().manual_seed(0))
    torch.testing.assert_close(kernels.grouped_matmul(x, w, offsets), gm.grouped_matmul_torch(x, w, offsets))
    assert CALL_COUNTS["grouped_matmul"] == before.get("grouped_matmul", 0) + 1
    assert CALL_COUNTS["grouped_matmul:torch"] == before.get("grouped_matmul:torch", 0) + 1


def test_dispatch_refuses_instead_of_falling_back(monkeypatch):
    monkeypatch.setenv("DLLM_KERNELS", "triton")
    x, w, offsets = _case([2, 3], 8, 4, torch.float32, "cpu", torch.Generator().manual_seed(0))
    if gm.triton_available() and not cs.triton_interpreted():
        with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
            kernels.grouped_matmul(x, w, offsets)
        with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
            gm.grouped_matmul_triton(x, w, offsets)


def test_kernel_check_fails_when_the_torch_path_runs(monkeypatch):
    """Control for the interpreter test: without the Triton path the check does not pass."""
    monkeypatch.setenv("DLLM_KERNELS", "torch")
    with pytest.raises(AssertionError, match="backend"):
        _kernel_check("cpu")


# ------------------------------------------------------------------------------------------
# Triton kernel vs reference
# ------------------------------------------------------------------------------------------


def _kernel_check(device: str) -> None:
    """Dispatch with DLLM_KERNELS=triton on ``device`` against the reference (and an MoE layer
    on the kernel against the same layer on the reference); raises unless the kernel ran."""
    backend = kernel_backend(device)
    assert backend == "triton", f"dispatch backend is {backend!r}, not 'triton'"
    if device == "cpu":
        assert cs.triton_interpreted(), "kernel was not built for the Triton interpreter"
    reference = gm.grouped_matmul_torch

    def refuse(*args, **kwargs):
        raise AssertionError("the dispatch fell back to the torch reference")

    g = torch.Generator().manual_seed(0)
    dtypes = [(torch.float32, 1e-5)] + ([(torch.bfloat16, 2e-2), (torch.float16, 5e-3)] if device == "cuda" else [])
    before = CALL_COUNTS["grouped_matmul:triton"]
    calls = 0
    gm.grouped_matmul_torch = refuse
    try:
        for dtype, tol in dtypes:
            for counts in COUNTS:
                for K, N_out in [(40, 72), (16, 8), (96, 130)]:
                    x, w, offsets = _case(counts, K, N_out, dtype, device, g)
                    got = kernels.grouped_matmul(x, w, offsets)
                    calls += 1
                    want = reference(x.cpu(), w.cpu(), offsets.cpu())
                    assert got.dtype == dtype and got.shape == want.shape
                    torch.testing.assert_close(got.cpu().float(), want.float(), rtol=tol, atol=tol,
                                               msg=lambda m: f"{counts} K={K} N_out={N_out} {dtype}: {m}")
            # int32 offsets, strided views of x and w, explicit tiles
            x, w, offsets = _case([5, 0, 30], 48, 40, dtype, device, g)
            xs, ws = torch.cat([x, x], 1)[:, ::2], w.transpose(1, 2).contiguous().transpose(1, 2)
            for bm, bn, bk in [(16, 16, 16), (32, 64, 32), (64, 32, 16)]:
                got = gm.grouped_matmul_triton(xs, ws, offsets.int(), block_m=bm, block_n=bn, block_k=bk)
                torch.testing.assert_close(got.cpu().float(), reference(xs.cpu(), ws.cpu(), offsets.cpu()).float(),
                                           rtol=tol, atol=tol)
        assert CALL_COUNTS["grouped_matmul:triton"] - before == calls
    finally:
        gm.grouped_matmul_torch = reference
    _moe_layer_check(device)
    if device == "cuda":
        _row_bits_check()


def _moe_layer_check(device: str) -> None:
    """MoEMLP on the kernel equals MoEMLP on the reference."""
    from dllm.models.config import MoEConfig
    from dllm.models.moe import MoEMLP

    torch.manual_seed(0)
    cfg = MoEConfig(n_experts=8, top_k=2, expert_hidden=32, score="sigmoid", norm_topk=True, routed_scale=2.5,
                    n_group=4, topk_group=2, expert_bias=True, shared_hidden=32)
    layer = MoEMLP(64, cfg).to(device)
    x = torch.randn(2, 13, 64, device=device)
    before = CALL_COUNTS["grouped_matmul:triton"]
    got = layer(x)
    assert CALL_COUNTS["grouped_matmul:triton"] - before == 3  # gate, up, down: one launch each
    with kernels.kernels_set_to("torch"):
        want = layer(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _row_bits_check() -> None:
    """On a GPU a row's bits do not depend on its expert's row count or the row tile."""
    g = torch.Generator().manual_seed(3)
    for dtype in (torch.float32, torch.bfloat16):
        w = torch.randn(4, 256, 512, generator=g).to(dtype).cuda()
        x = torch.randn(300, 512, generator=g).to(dtype).cuda()
        alone = gm.grouped_matmul_triton(x[7:8], w[2:3], torch.tensor([0, 1], device="cuda"))[0]
        for offsets in ([0, 0, 0, 300, 300], [0, 5, 7, 8, 300], [0, 100, 150, 250, 300]):
            off = torch.tensor(offsets, device="cuda")
            for bm in (16, 32, 64):
                y = gm.grouped_matmul_triton(x, w, off, block_m=bm)
                e = next(i for i in range(4) if offsets[i] <= 7 < offsets[i + 1])
                if e == 2:
                    assert torch.equal(y[7], alone), (dtype, offsets, bm)


@skip_interpreted
def test_triton_kernel_matches_reference_interpreted():
    pytest.importorskip("triton", reason=NO_TRITON)
    run_kernel_check(__file__, "cpu", interpret=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the native run needs a GPU")
def test_triton_kernel_matches_reference_on_gpu():
    pytest.importorskip("triton", reason=NO_TRITON)
    run_kernel_check(__file__, "cuda", interpret=False)


def test_the_row_tile_is_pinned_or_follows_the_rows_per_expert(monkeypatch):
    """The Triton launch's row tile: ``block_m`` pins it whatever the batch (batch-invariant mode);
    by default it follows the mean rows per expert, 16 up to 16 rows, 64 past 32 (Hopper's
    warpgroup MMA from 64 rows). The pinned tile of the batch-invariant option is the default
    one at decode sizes, so a batch-1 decode keeps its tiles. The launch is recorded, not run."""
    pytest.importorskip("triton")
    from dllm.models.batch_invariant import INVARIANT_ROW_TILE

    launched = []

    class Launch:
        def __getitem__(self, grid):
            return lambda *args, **meta: launched.append(meta["BLOCK_M"])

    monkeypatch.setattr(gm, "_grouped_matmul_kernel", Launch())
    monkeypatch.setattr(cs, "triton_interpreted", lambda: True)
    g = torch.Generator().manual_seed(0)

    def tile(rows_per_expert: int, block_m: int | None = None) -> int:
        x, w, offsets = _case([rows_per_expert] * 4, 8, 8, torch.float32, "cpu", g)
        gm.grouped_matmul_triton(x, w, offsets, block_m=block_m)
        return launched[-1]

    assert [tile(n) for n in (1, 16, 17, 32, 33, 200)] == [16, 16, 32, 32, 64, 64]
    assert [tile(n, block_m=16) for n in (1, 33, 200)] == [16, 16, 16]
    assert INVARIANT_ROW_TILE == tile(1) == tile(16) < 64


if __name__ == "__main__":
    _kernel_check(sys.argv[1])
    print("KERNEL-OK")
