"""confidence_stats: the torch reference equals plain torch, the Triton kernel equals the
reference (under TRITON_INTERPRET=1 on CPU in a subprocess, natively when a GPU is present), and
the dispatch picks, counts and refuses as documented.

The interpreter flag is read when ``triton.jit`` decorates the kernel, i.e. when dllm is first
imported, which pytest has long done by the time this module runs; so the kernel check runs this
file as a script in a fresh interpreter with the flag set (``_kernel_check``), and that check
refuses to pass unless the Triton path really ran.
"""
from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch

import dllm.kernels as kernels
from dllm.kernels import CALL_COUNTS, TokenStats, confidence_stats, kernel_backend
from dllm.kernels.confidence_stats import confidence_stats_torch, hash_uniform_torch
from tests.kernels.kernel_subprocess import NO_TRITON, run_kernel_check, skip_interpreted

# the module (the package attribute of that name is the dispatch function)
cs = importlib.import_module("dllm.kernels.confidence_stats")

M32 = 0xFFFFFFFF


def _plain(x: torch.Tensor, excluded=()) -> dict:
    """Straightforward torch: softmax, topk(2), entropy, argmax."""
    y = x.float().clone()
    y[:, list(excluded)] = float("-inf")
    p = y.softmax(-1)
    top_p, top_l = p.topk(2, -1).values, y.topk(2, -1).values
    logp = torch.where(p > 0, p.log(), torch.zeros_like(p))
    token = y.argmax(-1)
    return {"token": token, "prob": p.gather(-1, token[:, None])[:, 0], "margin_prob": top_p[:, 0] - top_p[:, 1],
            "margin_logit": top_l[:, 0] - top_l[:, 1], "entropy": -(p * logp).sum(-1)}


def _assert_matches(st: TokenStats, want: dict, **tol) -> None:
    assert st.token.dtype == torch.int64 and st.token.tolist() == want["token"].tolist()
    for name in ("prob", "margin_prob", "margin_logit", "entropy"):
        got = getattr(st, name)
        assert got.dtype == torch.float32, name
        torch.testing.assert_close(got, want[name], msg=name, **tol)


# ------------------------------------------------------------------------------------------
# Reference vs plain torch
# ------------------------------------------------------------------------------------------


def test_reference_matches_plain_torch_with_ties_inf_and_exclusions():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 50, generator=g) * 3
    x[1, 7] = x[1, 3] = 100.0  # tie for the max: the first index wins, margin 0
    x[2, :40] = float("-inf")  # filtered row
    x[3, 5] = 200.0  # the row's max is excluded: the next best is chosen
    x[4, :] = 0.0  # uniform row: token 0, entropy log 50
    st = confidence_stats_torch(x, excluded_ids=torch.tensor([5]))
    want = _plain(x, excluded=[5])
    _assert_matches(st, want)
    assert st.token[1] == 3 and st.margin_logit[1] == 0 and st.margin_prob[1] == 0
    assert st.token[3] != 5 and st.token[4] == 0
    torch.testing.assert_close(st.entropy[4], torch.tensor(49.0).log())
    _assert_matches(confidence_stats_torch(x), _plain(x))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reference_computes_in_float32_for_half_inputs(dtype):
    x = (torch.randn(4, 300, generator=torch.Generator().manual_seed(1)) * 4).to(dtype)
    _assert_matches(confidence_stats_torch(x), _plain(x.float()))


def test_reference_single_candidate_rows():
    x = torch.tensor([[2.0], [-1.0]])  # V = 1
    st = confidence_stats_torch(x)
    assert st.token.tolist() == [0, 0] and st.prob.tolist() == [1.0, 1.0]
    assert st.margin_prob.tolist() == [1.0, 1.0] and st.entropy.tolist() == [0.0, 0.0]
    assert torch.isinf(st.margin_logit).all()


def test_reused_scratch_gives_the_same_statistics_and_leaves_the_logits_alone():
    """One decode reuses a StatsScratch across steps whose row counts and dtypes change."""
    g = torch.Generator().manual_seed(2)
    scratch = cs.StatsScratch()
    for rows, vocab, dtype in [(8, 300, torch.float32), (3, 300, torch.bfloat16), (8, 120, torch.float32),
                               (12, 500, torch.float16), (2, 500, torch.float32)]:
        x = (torch.randn(rows, vocab, generator=g) * 4).to(dtype)
        x[0, 1] = x[0, 9] = x.max() + 1  # a tie for the max
        before = x.clone()
        for temperature in (0.0, 0.7):
            fresh = confidence_stats_torch(x, temperature=temperature, seed=3, excluded_ids=torch.tensor([4]))
            reused = confidence_stats_torch(x, temperature=temperature, seed=3, excluded_ids=torch.tensor([4]),
                                            scratch=scratch)
            for name in TokenStats._fields:
                assert torch.equal(getattr(fresh, name), getattr(reused, name)), (rows, vocab, name)
        assert torch.equal(x, before)
        _assert_matches(confidence_stats_torch(x, excluded_ids=torch.tensor([4]), scratch=scratch),
                        _plain(x.float(), excluded=[4]))


def test_gumbel_sampling_is_seeded_offset_shifted_and_follows_the_tempered_softmax():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, 0.5])
    x = logits.expand(20000, 5).contiguous()
    T = 0.8
    a = confidence_stats_torch(x, temperature=T, seed=3)
    assert a.token.tolist() == confidence_stats_torch(x, temperature=T, seed=3).token.tolist()
    assert a.token.tolist() != confidence_stats_torch(x, temperature=T, seed=4).token.tolist()
    shifted = confidence_stats_torch(x[5:], temperature=T, seed=3, offset=5)
    assert shifted.token.tolist() == a.token[5:].tolist()  # noise depends on offset + row only
    freq = torch.bincount(a.token, minlength=5).float() / len(x)
    torch.testing.assert_close(freq, (logits / T).softmax(-1), atol=0.015, rtol=0)
    # prob stays the un-tempered probability of the chosen token
    torch.testing.assert_close(a.prob, logits.softmax(-1)[a.token])


def test_per_row_seeds_and_counters_make_each_row_its_own_stream():
    """A row's sample depends on its own (seed, counter) only: reordering the rows reorders the
    tokens, the shared-seed default is counter = offset + row, and seed and counter both matter."""
    logits = torch.randn(6, 40, generator=torch.Generator().manual_seed(5))
    seeds = torch.tensor([7, 7, 8, 2**40 + 3, 0, 9])
    counters = torch.tensor([0, 1, 1, 5 << 32 | 3, 2**33, 17])
    a = confidence_stats_torch(logits, temperature=1.0, seed=seeds, counter=counters)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    b = confidence_stats_torch(logits[perm], temperature=1.0, seed=seeds[perm], counter=counters[perm])
    assert b.token.tolist() == a.token[perm].tolist()
    shared = confidence_stats_torch(logits, temperature=1.0, seed=7, offset=4)
    explicit = confidence_stats_torch(logits, temperature=1.0, seed=torch.full((6,), 7),
                                      counter=torch.arange(4, 10))
    assert shared.token.tolist() == explicit.token.tolist()
    u = hash_uniform_torch(seeds[:, None], counters[:, None], torch.arange(64)[None, :])
    assert not torch.equal(u[0], u[1]) and not torch.equal(u[1], u[2])  # counter, then seed differ
    with pytest.raises(ValueError, match="per-row seeds"):
        confidence_stats_torch(logits, temperature=1.0, seed=seeds[:3])


def _lowbias32_py(x: int) -> int:
    x ^= x >> 16
    x = (x * 0x7FEB352D) & M32
    x ^= x >> 15
    x = (x * 0x846CA68B) & M32
    return x ^ (x >> 16)


def test_hash_is_lowbias32_on_uint32_and_pinned():
    """The torch hash equals a plain-Python uint32 lowbias32 (no int64 overflow), and its values
    are pinned: the Triton kernel implements the same bits, so a change must be made on both."""
    vals = [0, 1, 2, 0x7FFFFFFF, 0x80000000, M32, 0x12345678, 0xDEADBEEF]
    assert cs._lowbias32_torch(torch.tensor(vals)).tolist() == [_lowbias32_py(v) for v in vals]
    seed, rows, cols = 2**40 + 5, [2**33, 0, 17], [0, 1, 126463]
    s64 = seed & (2**64 - 1)
    s32 = (s64 ^ (s64 >> 32)) & M32
    c32 = [(r & M32) ^ _lowbias32_py(r >> 32) for r in rows]  # the high half hashed first
    keys = [_lowbias32_py(s32 ^ _lowbias32_py(c ^ 0x9E3779B9)) for c in c32]
    bits = [[_lowbias32_py(k ^ ((c * 0x85EBCA6B) & M32)) for c in cols] for k in keys]
    want = torch.tensor([[((b >> 9) + 0.5) / 2**23 for b in row] for row in bits], dtype=torch.float32)
    u = hash_uniform_torch(seed, torch.tensor(rows)[:, None], torch.tensor(cols)[None, :])
    assert torch.equal(u, want)
    pinned = hash_uniform_torch(7, torch.tensor([[3], [4]]), torch.tensor([[0, 1, 2]]))
    assert ((pinned * 2**23 - 0.5).long()).tolist() == [[4287896, 8004949, 563838], [3049109, 6954785, 4697058]]
    big = hash_uniform_torch(0, torch.arange(64)[:, None], torch.arange(4096)[None, :])
    assert 0 < big.min() and big.max() < 1 and abs(big.mean().item() - 0.5) < 0.01


def test_token_stats_reshape_and_index():
    st = confidence_stats_torch(torch.randn(6, 11, generator=torch.Generator().manual_seed(2)))
    two = st.reshape(2, 3)
    assert all(f.shape == (2, 3) for f in two)
    sub = st.index(torch.tensor([4, 1]))
    assert sub.token.tolist() == [st.token[4].item(), st.token[1].item()]
    picked = two.index(two.prob > 0.5)
    assert isinstance(picked, TokenStats) and torch.equal(picked.entropy, st.entropy[st.prob > 0.5])


# ------------------------------------------------------------------------------------------
# Dispatch
# ------------------------------------------------------------------------------------------


def test_dispatch_auto_uses_torch_on_cpu_and_counts(monkeypatch):
    monkeypatch.setenv("DLLM_KERNELS", "auto")
    assert kernel_backend("cpu") == "torch"
    before = dict(CALL_COUNTS)
    confidence_stats(torch.randn(2, 10))
    assert CALL_COUNTS["confidence_stats"] == before.get("confidence_stats", 0) + 1
    assert CALL_COUNTS["confidence_stats:torch"] == before.get("confidence_stats:torch", 0) + 1
    monkeypatch.setenv("DLLM_KERNELS", "torch")
    assert kernel_backend("cuda") == "torch"


def test_dispatch_refuses_instead_of_falling_back(monkeypatch):
    monkeypatch.setenv("DLLM_KERNELS", "triton")
    if cs.triton_available() and not cs.triton_interpreted():
        with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
            confidence_stats(torch.randn(2, 10))
    monkeypatch.setattr(cs, "triton_available", lambda: False)
    with pytest.raises(RuntimeError, match="triton is not importable"):
        kernel_backend("cuda")
    monkeypatch.setenv("DLLM_KERNELS", "cuda-please")
    with pytest.raises(ValueError, match="DLLM_KERNELS"):
        kernel_backend("cpu")


def test_kernels_set_to_restores_the_callers_choice(monkeypatch):
    """A bench that times the torch path beside the kernels leaves DLLM_KERNELS as the user set
    it (bench/moe_microbench.py reset a user's triton to auto), or unset."""
    for before in ("triton", "torch", None):
        if before is None:
            monkeypatch.delenv("DLLM_KERNELS", raising=False)
        else:
            monkeypatch.setenv("DLLM_KERNELS", before)
        with kernels.kernels_set_to("torch"):
            assert kernel_backend("cuda") == "torch"
        assert os.environ.get("DLLM_KERNELS") == before
        with pytest.raises(KeyError), kernels.kernels_set_to("auto"):  # restored on the way out of an error too
            assert os.environ["DLLM_KERNELS"] == "auto"
            raise KeyError
        assert os.environ.get("DLLM_KERNELS") == before
    with pytest.raises(ValueError, match="use one of"):
        with kernels.kernels_set_to("cuda-please"):
            pass
    assert "DLLM_KERNELS" not in os.environ


def test_kernel_check_fails_when_the_torch_path_runs(monkeypatch):
    """Control for the interpreter test: without the Triton path the check does not pass."""
    monkeypatch.setenv("DLLM_KERNELS", "torch")
    with pytest.raises(AssertionError, match="backend"):
        _kernel_check("cpu", [(1, 17, torch.float32)])


def test_engine_reads_statistics_only_through_the_dispatch(tiny_models):
    before = CALL_COUNTS["confidence_stats"]
    out = tiny_models["llada"].generate("hi", gen_length=8, steps=8, stop_at_eos=False)
    assert CALL_COUNTS["confidence_stats"] - before == out.stats[0]["nfe"]


# ------------------------------------------------------------------------------------------
# Triton kernel vs reference
# ------------------------------------------------------------------------------------------

INTERPRETED_SHAPES = [(1, 17, torch.float32), (5, 1000, torch.float32), (3, 126464, torch.float32),
                      (7, 333, torch.float32), (3, 1000, torch.bfloat16), (2, 4097, torch.bfloat16),
                      (2, 129, torch.float16)]
GPU_SHAPES = [(1, 17, torch.float32), (64, 126464, torch.float32), (64, 126464, torch.bfloat16),
              (7, 32001, torch.float16), (256, 32000, torch.bfloat16)]


def _logits(R: int, V: int, dtype: torch.dtype, device: str, g: torch.Generator) -> torch.Tensor:
    """Random (R, V) logits with a filtered (-inf) stretch, a cross-chunk tie and an all-equal row."""
    x = torch.randn(R, V, generator=g) * 4
    x[0, : V // 3] = float("-inf")
    if R > 1 and V > 100:
        x[1, V - 2] = x[1, 60] = 50.0  # tie for the max, far apart: the first index wins
    if R > 2:
        x[2] = 1.0
    return x.to(dtype).to(device)


def _kernel_check(device: str, shapes) -> None:
    """Dispatch with DLLM_KERNELS=triton on ``device`` against the reference; raises unless the
    kernel ran (backend 'triton', the reference patched to raise inside the dispatch)."""
    backend = kernel_backend(device)
    assert backend == "triton", f"dispatch backend is {backend!r}, not 'triton'"
    if device == "cpu":
        assert cs.triton_interpreted(), "kernel was not built for the Triton interpreter"
    reference = cs.confidence_stats_torch

    def refuse(*args, **kwargs):
        raise AssertionError("the dispatch fell back to the torch reference")

    cs.confidence_stats_torch = refuse
    before = CALL_COUNTS["confidence_stats:triton"]
    try:
        g = torch.Generator().manual_seed(0)
        calls = 0
        for R, V, dtype in shapes:
            x = _logits(R, V, dtype, device, g)
            cases = [{}, {"excluded_ids": torch.tensor([1, V - 1], device=device)},
                     {"temperature": 1.0, "seed": 7, "offset": 3},
                     {"temperature": 0.5, "seed": 2**40 + 1, "offset": 2**33, "excluded_ids": torch.tensor([2])},
                     {"temperature": 1.0, "seed": torch.arange(R, device=device) * 2**35 + 11,
                      "counter": (torch.arange(R, device=device) << 32) + 2**31 + 5}]
            for kw in cases:
                got = kernels.confidence_stats(x, **kw)
                want = reference(x, **kw)
                calls += 1
                assert got.token.tolist() == want.token.tolist(), (R, V, dtype, kw)
                for name in ("prob", "margin_prob", "margin_logit", "entropy"):
                    torch.testing.assert_close(getattr(got, name), getattr(want, name), rtol=1e-5, atol=1e-6,
                                               msg=lambda m, n=name, k=kw: f"{n} {R}x{V} {dtype} {k}: {m}")
            # many chunks per row: cross-chunk merging of max, top-2, ties and the online sums
            block = 64 if V < 5000 else 4096
            small = cs.confidence_stats_triton(x, block_v=block, excluded_ids=torch.tensor([0], device=device))
            want = reference(x, excluded_ids=torch.tensor([0]))
            assert small.token.tolist() == want.token.tolist(), (R, V, dtype, block)
            for name in ("prob", "margin_prob", "margin_logit", "entropy"):
                torch.testing.assert_close(getattr(small, name), getattr(want, name), rtol=1e-5, atol=1e-6)
        strided = _logits(4, 600, torch.float32, device, g)[:, ::2]  # column stride 2: copied
        got, want = kernels.confidence_stats(strided), reference(strided)
        calls += 1
        assert got.token.tolist() == want.token.tolist()
        torch.testing.assert_close(got.entropy, want.entropy, rtol=1e-5, atol=1e-6)
        rows = _logits(6, 500, torch.float32, device, g)[1:4]  # row view: row stride used as is
        got, want = kernels.confidence_stats(rows), reference(rows)
        calls += 1
        assert got.token.tolist() == want.token.tolist()
        assert CALL_COUNTS["confidence_stats:triton"] - before == calls
    finally:
        cs.confidence_stats_torch = reference


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
