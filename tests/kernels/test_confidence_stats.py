"""The Triton kernel equals its torch reference (run under TRITON_INTERPRET=1 on CPU, natively
on a GPU), and the reference equals plain torch."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from dllm.kernels import CALL_COUNTS, confidence_stats, kernel_backend
from dllm.kernels.confidence_stats import confidence_stats_torch


def test_reference_matches_plain_torch():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 50, generator=g) * 3
    x[1, 7] = x[1, 3] = 100.0  # tie: the first index wins
    x[2, :40] = float("-inf")
    excluded = torch.tensor([5])
    st = confidence_stats_torch(x, excluded_ids=excluded)
    y = x.clone()
    y[:, 5] = float("-inf")
    p = y.softmax(-1)
    assert st.token.tolist() == y.argmax(-1).tolist() and st.token[1] == 3
    torch.testing.assert_close(st.prob, p.max(-1).values)
    top = p.topk(2, -1).values
    torch.testing.assert_close(st.margin_prob, top[:, 0] - top[:, 1])
    lt = y.topk(2, -1).values
    torch.testing.assert_close(st.margin_logit, lt[:, 0] - lt[:, 1])
    ent = -(p * torch.where(p > 0, p.log(), torch.zeros_like(p))).sum(-1)
    torch.testing.assert_close(st.entropy, ent)


def test_dispatch_uses_torch_on_cpu_by_default(monkeypatch):
    monkeypatch.setenv("DLLM_KERNELS", "auto")
    assert kernel_backend("cpu") == "torch"
    before = CALL_COUNTS["confidence_stats:torch"]
    confidence_stats(torch.randn(2, 10))
    assert CALL_COUNTS["confidence_stats:torch"] == before + 1
    monkeypatch.setenv("DLLM_KERNELS", "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        kernel_backend("cpu")


def test_engine_reads_statistics_only_through_the_dispatch(tiny_models):
    before = CALL_COUNTS["confidence_stats"]
    out = tiny_models["llada"].generate("hi", gen_length=8, steps=8, stop_at_eos=False)
    assert CALL_COUNTS["confidence_stats"] - before == out.stats[0]["nfe"]


KERNEL_CHECK = textwrap.dedent("""
    import torch
    from dllm.kernels import confidence_stats, kernel_backend, CALL_COUNTS
    from dllm.kernels.confidence_stats import confidence_stats_torch
    assert kernel_backend(DEVICE) == "triton", kernel_backend(DEVICE)
    g = torch.Generator().manual_seed(0)
    for R, V, dtype in SHAPES:
        x = (torch.randn(R, V, generator=g) * 4).to(dtype).to(DEVICE)
        x[0, : V // 3] = float("-inf")
        for kw in ({}, {"excluded_ids": torch.tensor([1, V - 1])}, {"temperature": 1.0, "seed": 7, "offset": 3}):
            got = confidence_stats(x, **kw)
            ref = confidence_stats_torch(x, **kw)
            assert got.token.tolist() == ref.token.tolist(), (R, V, dtype, kw)
            for name in ("prob", "margin_prob", "margin_logit", "entropy"):
                torch.testing.assert_close(getattr(got, name), getattr(ref, name), rtol=1e-4, atol=1e-5, msg=name)
    assert CALL_COUNTS["confidence_stats:triton"] > 0 and CALL_COUNTS["confidence_stats:torch"] == 0
    print("KERNEL-OK")
""")


def _run_kernel_check(device: str, shapes: str, env_extra: dict) -> None:
    code = f"import torch\nDEVICE = {device!r}\nSHAPES = {shapes}\n" + KERNEL_CHECK
    env = {**os.environ, "DLLM_KERNELS": "triton", **env_extra}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    assert "KERNEL-OK" in done.stdout, done.stdout + done.stderr


def test_triton_kernel_matches_reference_interpreted():
    pytest.importorskip("triton")
    shapes = "[(1, 17, torch.float32), (5, 1000, torch.float32), (3, 1000, torch.bfloat16), (2, 126464, torch.float32)]"
    _run_kernel_check("cpu", shapes, {"TRITON_INTERPRET": "1"})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the native run needs a GPU")
def test_triton_kernel_matches_reference_on_gpu():
    shapes = "[(1, 17, torch.float32), (64, 126464, torch.float32), (64, 126464, torch.bfloat16), (7, 32001, torch.float16)]"
    _run_kernel_check("cuda", shapes, {})
