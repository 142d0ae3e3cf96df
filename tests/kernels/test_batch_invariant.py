"""Batch-invariant kernels (issue 39): matmul, RMSNorm (both arithmetic orders, with and without
a weight), log-softmax and attention (per-row validity, and DiffusionGemma's causal / sliding rule
by position with scale 1) give a row the same bits alone and inside ragged batches of 2..33 rows,
and match their torch references (RMSNorm rounding where its reference does, log-softmax counting
a max in the last lane); the MoE grouped product is checked for the same property (its reference
parity is test_grouped_matmul's).

The Triton check runs this file as a script in a fresh interpreter (under TRITON_INTERPRET=1 on
CPU, natively on a GPU), as the other kernel tests do, and refuses to pass unless the Triton path
ran (the references patched to raise inside the dispatch). The control shows the row check fails
for a product whose K split depends on the row count, the cuBLAS behaviour the kernels remove.
"""
from __future__ import annotations

import importlib
import sys

import pytest
import torch

import dllm.kernels as kernels
from dllm.kernels import CALL_COUNTS, kernel_backend
from tests.kernels.kernel_subprocess import NO_TRITON, run_kernel_check, skip_interpreted

im = importlib.import_module("dllm.kernels.invariant_matmul")
rn = importlib.import_module("dllm.kernels.rms_norm")
ls = importlib.import_module("dllm.kernels.log_softmax")
gm = importlib.import_module("dllm.kernels.grouped_matmul")
ia = importlib.import_module("dllm.kernels.invariant_attention")
cs = importlib.import_module("dllm.kernels.confidence_stats")  # the launchers' triton checks

BATCH_SIZES = (2, 7, 16, 33)  # a sample of 2..33: below, at and past one row tile (BLOCK_M = 32)
DTYPES = (torch.float32, torch.bfloat16)


def assert_row_invariant(fn, row: torch.Tensor, g: torch.Generator, what) -> None:
    """fn(row[None]) equals, bit for bit, that row's output inside batches of BATCH_SIZES random
    rows (at the first and the last position)."""
    alone = fn(row[None])[0]
    for n in BATCH_SIZES:
        for at in (0, n - 1):
            batch = (torch.randn(n, *row.shape, generator=g) * 3).to(row.dtype).to(row.device)
            batch[at] = row
            got = fn(batch)[at]
            assert torch.equal(got, alone), (what, n, at, (got.float() - alone.float()).abs().max().item())


def _cases(device: str, g: torch.Generator):
    """(name, dispatch fn, reference fn, row, tolerance) for each kernel and dtype; tiny shapes with
    K, D and V not multiples of the blocks (masked tails) and more than one K / V chunk."""
    for dtype in DTYPES:
        tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1.6e-2, "atol": 1e-2}
        w = (torch.randn(70, 100, generator=g) / 10).to(dtype).to(device)  # N = 70 > BLOCK_N, K = 100
        b = torch.randn(70, generator=g).to(dtype).to(device)
        x = torch.randn(100, generator=g).to(dtype).to(device)
        # default arguments bind this dtype's tensors (a closure would see the last loop's).
        # bfloat16 tl.dot is wrong under this triton's interpreter (as test_grouped_matmul notes):
        # the bfloat16 product is checked on a GPU only
        if dtype == torch.float32 or device == "cuda":
            yield (f"linear {dtype}", lambda t, w=w: kernels.invariant_linear(t, w),
                   lambda t, w=w: im.invariant_linear_torch(t, w), x, tol)
            yield (f"linear+bias {dtype}", lambda t, w=w, b=b: kernels.invariant_linear(t, w, b),
                   lambda t, w=w, b=b: im.invariant_linear_torch(t, w, b), x, tol)
        nw = (1 + torch.randn(1100, generator=g) / 4).to(dtype).to(device)  # D = 1100: two chunks
        xn = (torch.randn(1100, generator=g) * 2).to(dtype).to(device)
        yield (f"rms_norm {dtype}", lambda t, nw=nw: kernels.rms_norm(t, nw, 1e-6),
               lambda t, nw=nw: rn.rms_norm_torch(t, nw, 1e-6), xn, tol)
        yield (f"rms_norm gemma {dtype}", lambda t, nw=nw: kernels.rms_norm(t, nw, 1e-6, cast_last=True),
               lambda t, nw=nw: rn.rms_norm_torch(t, nw, 1e-6, cast_last=True), xn, tol)
        yield (f"rms_norm gemma no weight {dtype}", lambda t: kernels.rms_norm(t, None, 1e-6, cast_last=True),
               lambda t: rn.rms_norm_torch(t, None, 1e-6, cast_last=True), xn, tol)
        xl = (torch.randn(5000, generator=g) * 4).to(dtype).to(device)  # V = 5000: two chunks
        xl[:700] = float("-inf")  # a filtered stretch: whole -inf lanes in the first chunk
        yield (f"log_softmax {dtype}", kernels.log_softmax, ls.log_softmax_torch, xl,
               {"rtol": 1e-5, "atol": 1e-5})
        xm = xl.clone()
        xm[-1] = xl.max() + 8  # the max in the last lane of the masked tail chunk: dropping it moves log Z
        yield (f"log_softmax max last {dtype}", kernels.log_softmax, ls.log_softmax_torch, xm,
               {"rtol": 1e-5, "atol": 1e-5})


def _grouped_row_check(device: str, g: torch.Generator) -> None:
    """The MoE grouped product has the property too: a row's output from its expert is the same
    bits alone and as the first or last row of that expert inside ragged batches of 2..33 rows
    spread over 3 experts, and under every row tile the launcher picks (16, 32, 64)."""
    E, K, N = 3, 100, 70
    w = (torch.randn(E, N, K, generator=g) / 10).to(device)
    row = torch.randn(K, generator=g).to(device)
    alone = kernels.grouped_matmul(row[None], w[1:2], torch.tensor([0, 1], device=device))[0]
    for n in BATCH_SIZES:
        x = torch.randn(n, K, generator=g).to(device)
        lo, hi = n // 3, n - n // 3  # expert 1 holds rows [lo, hi), at least one
        offsets = torch.tensor([0, lo, hi, n], device=device)
        for at in (lo, hi - 1):
            x[at] = row
            assert torch.equal(kernels.grouped_matmul(x, w, offsets)[at], alone), ("grouped", n, at)
    for bm in (32, 64):
        assert torch.equal(gm.grouped_matmul_triton(x, w, offsets, block_m=bm)[hi - 1], alone), ("grouped", bm)


def _attention_row_check(device: str, g: torch.Generator, reference) -> None:
    """Attention: one row's queries, keys and values (L positions, grouped K/V heads) give the
    same bits alone (no mask) and left-padded to the width of ragged batches of 2..33 rows, over
    all keys and over a block-causal key prefix; and ``reference``'s (SDPA's) values at the valid
    queries."""
    H, H_kv, D, L = 2, 1, 16, 21

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(device)

    q1, k1, v1 = rand(1, H, L, D), rand(1, H_kv, L, D), rand(1, H_kv, L, D)
    alone = kernels.invariant_attention(q1, k1, v1, None, L)[0]
    alone_prefix = kernels.invariant_attention(q1, k1, v1, None, 10)[0]
    for n in BATCH_SIZES:
        width = L + 3 + n % 5  # wider than the row: it is left-padded
        q, k, v = rand(n, H, width, D), rand(n, H_kv, width, D), rand(n, H_kv, width, D)
        valid = torch.ones(n, width, dtype=torch.bool, device=device)
        valid[:, : n % 4] = False  # the other rows: ragged padding of their own
        at, pad = n - 1, width - L
        valid[at, :pad] = False
        q[at, :, pad:], k[at, :, pad:], v[at, :, pad:] = q1[0], k1[0], v1[0]
        out = kernels.invariant_attention(q, k, v, valid, width)
        assert torch.equal(out[at, pad:], alone), ("attention", n)
        assert torch.equal(kernels.invariant_attention(q, k, v, valid, pad + 10)[at, pad:], alone_prefix), (
            "attention prefix", n)
        want = reference(q, k, v, valid, width)
        torch.testing.assert_close(out[valid], want[valid], rtol=1e-5, atol=1e-5)


def _positional_attention_row_check(device: str, g: torch.Generator, reference) -> None:
    """DiffusionGemma's encoder rule (a key seen when valid, at or before the query's position
    and, with a window, less than ``window`` positions back; scale 1): one row's L = 40 keys (two
    key chunks) with queries at every key (a prompt) or at the last 9 (a canvas after its prefix)
    give the same bits alone and left-padded in ragged batches; SDPA's values with the dense mask
    everywhere, including zeros for the pad queries of position -1 that see no key."""
    H, H_kv, D, L = 2, 1, 16, 40

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(device)

    q1, k1, v1 = rand(1, H, L, D), rand(1, H_kv, L, D), rand(1, H_kv, L, D)
    pos1 = torch.arange(L, device=device)[None]
    for window, T in ((None, L), (7, L), (7, 9)):
        rule = ia.Positions(pos1[:, L - T:], pos1, window)
        alone = kernels.invariant_attention(q1[:, :, L - T:], k1, v1, None, L, scale=1.0, positions=rule)[0]
        for n in BATCH_SIZES[::2] if T == L else BATCH_SIZES[1::2]:  # each batch size under some rule
            width = L + 3 + n % 5
            q, k, v = rand(n, H, width, D), rand(n, H_kv, width, D), rand(n, H_kv, width, D)
            valid = torch.ones(n, width, dtype=torch.bool, device=device)
            valid[:, : n % 4] = False
            at, pad = n - 1, width - L
            valid[at, :pad] = False
            q[at, :, pad:], k[at, :, pad:], v[at, :, pad:] = q1[0], k1[0], v1[0]
            key_pos = valid.long().cumsum(-1) - 1  # pads at -1: as queries they see no key
            t = width if T == L else T  # every key is a query, pads included, or the last T
            rule = ia.Positions(key_pos[:, width - t:], key_pos, window)
            out = kernels.invariant_attention(q[:, :, width - t:], k, v, valid, width, scale=1.0, positions=rule)
            assert torch.equal(out[at, t - T:], alone), ("positional attention", window, T, n)
            want = reference(q[:, :, width - t:], k, v, valid, width, scale=1.0, positions=rule)
            torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
            if T == L:
                assert out[at, :pad].eq(0).all() and not out.isnan().any(), ("pad queries", window, n)


def _norm_order_check(device: str, g: torch.Generator) -> None:
    """RMSNorm's kernel rounds where its reference does (RMSNorm: the normed row to x's dtype,
    then the weight; Gemma's order: one cast after the weight): in half precision its values are
    the reference's bits but where the sums' order moves a rounding (under 1%), where the other
    order differs in a quarter. float16: the interpreter does not round bfloat16 to nearest."""
    x = (torch.randn(2, 1100, generator=g) * 2).half().to(device)
    w = (1 + torch.randn(1100, generator=g) / 4).half().to(device)
    for cast_last in (False, True):
        got = kernels.rms_norm(x, w, 1e-6, cast_last=cast_last)
        differ = (got != rn.rms_norm_torch(x, w, 1e-6, cast_last=cast_last)).float().mean().item()
        assert differ <= 0.01, ("rms_norm order", cast_last, differ)


def _kernel_check(device: str) -> None:
    """Each kernel through the dispatch with DLLM_KERNELS=triton: row-invariant, and within
    float rounding of its reference; raises unless the Triton path ran."""
    assert kernel_backend(device) == "triton", f"dispatch backend is {kernel_backend(device)!r}, not 'triton'"
    if device == "cpu":
        assert cs.triton_interpreted(), "kernel was not built for the Triton interpreter"
    g = torch.Generator().manual_seed(0)
    references = {"invariant_linear": im, "rms_norm": rn, "log_softmax": ls, "grouped_matmul": gm,
                  "invariant_attention": ia}
    saved = {name: getattr(mod, f"{name}_torch") for name, mod in references.items()}

    def refuse(*args, **kwargs):
        raise AssertionError("the dispatch fell back to the torch reference")

    cases = list(_cases(device, g))  # built before the references are patched (they close over them)
    for name, mod in references.items():
        setattr(mod, f"{name}_torch", refuse)
    before = sum(CALL_COUNTS[f"{name}:triton"] for name in references)
    try:
        for what, fn, _, row, _ in cases:
            assert_row_invariant(fn, row, g, what)
        _grouped_row_check(device, g)
        _attention_row_check(device, g, saved["invariant_attention"])
        _positional_attention_row_check(device, g, saved["invariant_attention"])
    finally:
        for name, mod in references.items():
            setattr(mod, f"{name}_torch", saved[name])
    assert sum(CALL_COUNTS[f"{name}:triton"] for name in references) > before
    for what, fn, reference, row, tol in cases:
        batch = torch.stack([row, (torch.randn(row.shape, generator=g) * 3).to(row.dtype).to(device)])
        got, want = fn(batch), reference(batch)
        assert got.dtype == want.dtype and got.shape == want.shape, what
        torch.testing.assert_close(got, want, **tol, msg=lambda m, w=what: f"{w}: {m}")
    _norm_order_check(device, g)
    # a 3-d input (B, T, K) with a non-contiguous row layout goes through the same kernels
    w = torch.randn(24, 40, generator=g).to(device)
    x = torch.randn(3, 40, 5, generator=g).to(device).transpose(1, 2)  # (3, 5, 40), stride(-1) = 5
    torch.testing.assert_close(kernels.invariant_linear(x, w), x @ w.T, rtol=1e-5, atol=1e-5)


def test_row_check_fails_for_a_row_count_dependent_split():
    """Control: a product that splits K in two when there are more than 8 rows (as cuBLAS's
    split-K heuristics do) fails the row check; the plain per-row float32 sum passes it."""
    g = torch.Generator().manual_seed(1)
    w = torch.randn(16, 4096, generator=g)

    def split_k(x):
        if x.shape[0] <= 8:
            return (x[:, :, None] * w.T[None]).sum(1)
        half = 2048
        return (x[:, :half, None] * w.T[None, :half]).sum(1) + (x[:, half:, None] * w.T[None, half:]).sum(1)

    row = torch.randn(4096, generator=g)
    with pytest.raises(AssertionError):
        assert_row_invariant(split_k, row, g, "split-K")
    assert_row_invariant(lambda x: (x[:, :, None] * w.T[None]).sum(1), row, g, "one order")


def test_dispatch_auto_uses_the_references_on_cpu_and_counts(monkeypatch):
    monkeypatch.setenv("DLLM_KERNELS", "auto")
    before = dict(CALL_COUNTS)
    x, w, nw = torch.randn(3, 8), torch.randn(5, 8), torch.randn(8)
    assert torch.equal(kernels.invariant_linear(x, w), im.invariant_linear_torch(x, w))
    assert torch.equal(kernels.rms_norm(x, nw, 1e-5), rn.rms_norm_torch(x, nw, 1e-5))
    assert torch.equal(kernels.rms_norm(x, None, 1e-5, cast_last=True), rn.rms_norm_torch(x, None, 1e-5,
                                                                                         cast_last=True))
    assert torch.equal(kernels.log_softmax(x), ls.log_softmax_torch(x))
    for name, calls in (("invariant_linear", 1), ("rms_norm", 2), ("log_softmax", 1)):
        assert CALL_COUNTS[f"{name}:torch"] == before.get(f"{name}:torch", 0) + calls, name


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="share a float dtype"):
        im.invariant_linear_torch(torch.randn(2, 4), torch.randn(3, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"w \(N, K\)"):
        im.invariant_linear_torch(torch.randn(2, 4), torch.randn(3, 5))
    with pytest.raises(ValueError, match="weight"):
        rn.rms_norm_torch(torch.randn(2, 4), torch.randn(5), 1e-6)
    with pytest.raises(ValueError, match="V > 0"):
        ls.log_softmax_torch(torch.randn(2, 0))


def test_gemma_order_reference_is_gemma_rms_norm():
    """``cast_last`` is DiffusionGemma's own norm, with and without a weight, bit for bit."""
    from dllm.models.gemma import GemmaRMSNorm

    g = torch.Generator().manual_seed(2)
    for dtype in DTYPES:
        x = (torch.randn(3, 5, 48, generator=g) * 3).to(dtype)
        for scale in (True, False):
            norm = GemmaRMSNorm(48, 1e-6, scale=scale).to(dtype)
            if scale:
                norm.weight.data = (torch.rand(48, generator=g) + 0.5).to(dtype)
            with torch.no_grad():
                want = norm(x)
            assert torch.equal(rn.rms_norm_torch(x, norm.weight, 1e-6, cast_last=True), want), (dtype, scale)
    x = torch.randn(4, 8, generator=g)  # the two orders differ: the weight before or after the cast
    w = torch.rand(8, generator=g).bfloat16()
    assert not torch.equal(rn.rms_norm_torch(x.bfloat16(), w, 1e-6), rn.rms_norm_torch(x.bfloat16(), w, 1e-6,
                                                                                        cast_last=True))


def test_positional_reference_is_the_per_query_softmax():
    """The reference's positional rule against an explicit loop: each query's softmax (scale 1)
    over the valid keys at or before its position and inside the window; zeros where none."""
    g = torch.Generator().manual_seed(3)
    B, H, H_kv, S, T, D, window = 2, 4, 2, 12, 5, 8, 4
    q, k, v = torch.randn(B, H, T, D, generator=g), torch.randn(B, H_kv, S, D, generator=g), torch.randn(
        B, H_kv, S, D, generator=g)
    valid = torch.ones(B, S, dtype=torch.bool)
    valid[1, :9] = False  # row 1: three valid keys at positions 0..2
    key_pos = valid.long().cumsum(-1) - 1
    query_pos = key_pos[:, S - T:].clone()
    query_pos[1, 0] = -1  # a query before every key: sees none
    for win in (None, window):
        got = ia.invariant_attention_torch(q, k, v, valid, S, scale=1.0,
                                           positions=ia.Positions(query_pos, key_pos, win))
        want = torch.zeros(B, T, H, D, dtype=torch.float64)
        for b in range(B):
            for t in range(T):
                p = query_pos[b, t].item()
                keys = [s for s in range(S) if valid[b, s] and key_pos[b, s] <= p and (
                    win is None or key_pos[b, s] > p - win)]
                for h in range(H):
                    if keys:
                        kv = h // (H // H_kv)
                        w = (k[b, kv, keys].double() @ q[b, h, t].double()).softmax(0)
                        want[b, t, h] = w @ v[b, kv, keys].double()
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    assert got[1, 0].eq(0).all()


def test_positional_rule_is_refused_when_malformed():
    q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 1, 5, 4)
    pos = torch.arange(5)[None]
    for rule, match in ((ia.Positions(pos[:, 2:].float(), pos), "integer"),
                        (ia.Positions(pos, pos), r"query \(1, 3\)"),
                        (ia.Positions(pos[:, 2:], pos, 0), "window must be a positive int")):
        with pytest.raises(ValueError, match=match):
            ia.invariant_attention_torch(q, k, k, None, 5, positions=rule)


def test_kernel_check_fails_when_the_torch_path_runs(monkeypatch):
    """Control for the interpreter test: without the Triton path the check does not pass."""
    monkeypatch.setenv("DLLM_KERNELS", "torch")
    with pytest.raises(AssertionError, match="backend"):
        _kernel_check("cpu")


@skip_interpreted
def test_triton_kernels_are_row_invariant_interpreted():
    pytest.importorskip("triton", reason=NO_TRITON)
    run_kernel_check(__file__, "cpu", interpret=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the native run needs a GPU")
def test_triton_kernels_are_row_invariant_on_gpu():
    pytest.importorskip("triton", reason=NO_TRITON)
    run_kernel_check(__file__, "cuda", interpret=False)


if __name__ == "__main__":
    _kernel_check(sys.argv[1])
    print("KERNEL-OK")
