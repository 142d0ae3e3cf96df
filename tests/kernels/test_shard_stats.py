"""shard_stats: the Triton kernel equals the torch reference on random shards (under
TRITON_INTERPRET=1 on CPU in a subprocess, natively when a GPU is present), its partials combine
to one process's statistics, and the dispatch picks and counts as confidence_stats' does.

As in test_confidence_stats, the kernel check runs this file as a script in a fresh interpreter
(``_kernel_check``) and refuses to pass unless the Triton path really ran.
"""
from __future__ import annotations

import importlib
import sys

import pytest
import torch

import dllm.kernels as kernels
from dllm.kernels import CALL_COUNTS, kernel_backend
from dllm.kernels.confidence_stats import confidence_stats_torch
from tests.kernels.kernel_subprocess import NO_TRITON, run_kernel_check, skip_interpreted

# the module (the package attribute of that name is the dispatch function)
ss = importlib.import_module("dllm.kernels.shard_stats")

INTERPRETED_SHAPES = [(1, 17, torch.float32), (5, 1000, torch.float32), (7, 333, torch.float32),
                      (3, 4097, torch.bfloat16), (2, 129, torch.float16)]
GPU_SHAPES = [(1, 17, torch.float32), (64, 31616, torch.float32), (64, 63232, torch.bfloat16),
              (7, 32001, torch.float16)]
ID_FIELDS = (1, 6)  # argmax_id, best_id
FLOAT_FIELDS = (0, 2, 3, 4, 5, 7)


def _shard(R: int, V: int, dtype: torch.dtype, device: str, g: torch.Generator) -> torch.Tensor:
    """Random (R, V) shard logits with a filtered (-inf) stretch, a far-apart tie, an all-equal row
    and an all -inf row (a shard holding none of the row's candidates)."""
    x = torch.randn(R, V, generator=g) * 4
    x[0, : V // 3] = float("-inf")
    if R > 1 and V > 100:
        x[1, V - 2] = x[1, 60] = 50.0
    if R > 2:
        x[2] = 1.0
    if R > 3:
        x[3] = float("-inf")
    return x.to(dtype).to(device)


def _assert_partials(got: torch.Tensor, want: torch.Tensor, what) -> None:
    assert got.shape == want.shape and got.dtype == torch.float32, what
    for f in ID_FIELDS:
        assert got[:, f].tolist() == want[:, f].tolist(), (ss.PARTIAL_FIELDS[f], what)
    for f in FLOAT_FIELDS:
        torch.testing.assert_close(got[:, f], want[:, f], rtol=1e-5, atol=1e-6,
                                   msg=lambda m, n=ss.PARTIAL_FIELDS[f]: f"{n} {what}: {m}")


def test_dispatch_auto_uses_torch_on_cpu_and_counts(monkeypatch):
    monkeypatch.setenv("DLLM_KERNELS", "auto")
    before = dict(CALL_COUNTS)
    x = torch.randn(3, 40)
    got = kernels.shard_stats(x, vocab_start=80)
    assert torch.equal(got, ss.shard_stats_torch(x, vocab_start=80))
    assert CALL_COUNTS["shard_stats"] == before.get("shard_stats", 0) + 1
    assert CALL_COUNTS["shard_stats:torch"] == before.get("shard_stats:torch", 0) + 1


def _kernel_check(device: str, shapes) -> None:
    """Dispatch with DLLM_KERNELS=triton on ``device`` against the reference on shards at several
    offsets; raises unless the kernel ran (the reference patched to raise inside the dispatch)."""
    backend = kernel_backend(device)
    assert backend == "triton", f"dispatch backend is {backend!r}, not 'triton'"
    if device == "cpu":
        assert ss._cs.triton_interpreted(), "kernel was not built for the Triton interpreter"
    reference = ss.shard_stats_torch

    def refuse(*args, **kwargs):
        raise AssertionError("the dispatch fell back to the torch reference")

    ss.shard_stats_torch = refuse
    before = CALL_COUNTS["shard_stats:triton"]
    try:
        g = torch.Generator().manual_seed(0)
        calls = 0
        for R, V, dtype in shapes:
            x = _shard(R, V, dtype, device, g)
            for lo in (0, 3 * V + 5):
                # global ids: one before the shard, two inside, one past it
                excluded = torch.tensor([lo - 1, lo + 1, lo + V - 1, lo + V], device=device).clamp(min=0)
                # the whole row's max: >= the shard's, finite (also for the shard's all -inf row)
                gmax = x.float().amax(-1).clamp(min=-10.0) + torch.rand(R, generator=g).to(device)
                cases = [{}, {"excluded_ids": excluded},
                         {"temperature": 1.0, "seed": 7, "offset": 3, "global_max": gmax},
                         {"temperature": 0.5, "seed": 2**40 + 1, "offset": 2**33, "excluded_ids": excluded,
                          "global_max": gmax},
                         {"temperature": 1.0, "seed": torch.arange(R, device=device) * 2**35 + 11,
                          "counter": (torch.arange(R, device=device) << 32) + 2**31 + 5, "global_max": gmax}]
                for kw in cases:
                    got = kernels.shard_stats(x, vocab_start=lo, **kw)
                    calls += 1
                    _assert_partials(got, reference(x, vocab_start=lo, **kw), (R, V, dtype, lo, kw))
                # many chunks per row: cross-chunk merging of max, top-2, ties, sums and the noised best
                kw = {"vocab_start": lo, "temperature": 0.7, "seed": 5, "excluded_ids": excluded, "global_max": gmax}
                _assert_partials(ss.shard_stats_triton(x, block_v=64, **kw), reference(x, **kw), (R, V, dtype, lo, 64))
        # uneven shards of one row set combine to one process's statistics (tokens exact)
        x = _shard(3, 1000, torch.float32, device, g)  # no all -inf row: that is invalid for a whole row
        bounds = [0, 300, 333, 1000]
        excluded = torch.tensor([7, 310], device=device)
        gmax = x.index_fill(1, excluded, float("-inf")).amax(-1)
        for temperature in (0.0, 1.0):
            kw = {"temperature": temperature, "seed": 123, "offset": 5, "excluded_ids": excluded}
            parts = torch.stack([kernels.shard_stats(x[:, a:b], vocab_start=a, global_max=gmax, **kw)
                                 for a, b in zip(bounds, bounds[1:])])
            calls += len(bounds) - 1
            got, want = ss.combine_shard_stats_torch(parts), confidence_stats_torch(x, **kw)
            assert got.token.tolist() == want.token.tolist(), temperature
            for name, a, b in zip(want._fields[1:], got[1:], want[1:]):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")
        strided = _shard(4, 600, torch.float32, device, g)[:, ::2]  # column stride 2: copied
        _assert_partials(kernels.shard_stats(strided, vocab_start=10), reference(strided, vocab_start=10), "strided")
        rows = _shard(6, 500, torch.float32, device, g)[1:4]  # row view: row stride used as is
        _assert_partials(kernels.shard_stats(rows, vocab_start=10), reference(rows, vocab_start=10), "rows")
        calls += 2
        assert CALL_COUNTS["shard_stats:triton"] - before == calls
    finally:
        ss.shard_stats_torch = reference


def test_kernel_check_fails_when_the_torch_path_runs(monkeypatch):
    """Control for the interpreter test: without the Triton path the check does not pass."""
    monkeypatch.setenv("DLLM_KERNELS", "torch")
    with pytest.raises(AssertionError, match="backend"):
        _kernel_check("cpu", [(1, 17, torch.float32)])


@skip_interpreted
def test_triton_kernel_matches_reference_interpreted():
    pytest.importorskip("triton", reason=NO_TRITON)
    run_kernel_check(__file__, "cpu", interpret=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the native run needs a GPU")
def test_triton_kernel_matches_reference_on_gpu():
    pytest.importorskip("triton", reason=NO_TRITON)
    run_kernel_check(__file__, "cuda", interpret=False)


if __name__ == "__main__":
    dev = sys.argv[1]
    _kernel_check(dev, INTERPRETED_SHAPES if dev == "cpu" else GPU_SHAPES)
    print("KERNEL-OK")
