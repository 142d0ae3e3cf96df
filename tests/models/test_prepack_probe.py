"""The row-invariance probe behind ``load(prepack=True)``: a torch whose oneDNN gives a row other
bits at another row count (2.11 on an AVX2-only CPU) is refused before loading, naming the fix.

Apart from test_prepack.py, whose tests skip where prepacking is refused.
"""
from __future__ import annotations

import pytest
import torch

import dllm
from dllm.models import prepack
from dllm.models.prepack import PROBE_FULL_ROWS, first_varying_rows, row_bits_vary

CPU = dict(device="cpu", dtype="float32")


def _ops_missing() -> bool:
    return not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_linear_pointwise")


def test_probe_names_the_first_row_count_whose_bits_differ():
    x = torch.randn(PROBE_FULL_ROWS, 8)
    assert first_varying_rows(lambda rows: rows * 3.0, x) is None
    assert first_varying_rows(lambda rows: rows + 1e-3 * (rows.shape[0] < 5), x) == 1
    # one late count: every count the probe tries is compared, not only the first
    assert first_varying_rows(lambda rows: rows + 1e-3 * (rows.shape[0] == 7), x) == 7
    assert first_varying_rows(lambda rows: rows + 1e-3 * (rows.shape[0] == 8), x) is None


@pytest.mark.skipif(_ops_missing(), reason="this torch has no oneDNN prepacked linear ops")
def test_a_varying_torch_is_refused_before_loading(tiny_dirs, monkeypatch):
    monkeypatch.setattr(prepack, "row_bits_vary", lambda dtype: "rows differ here")
    with pytest.raises(ValueError, match="rows differ here; load with prepack=False"):
        dllm.load(tiny_dirs["llada"], prepack=True, **CPU)
    assert dllm.load(tiny_dirs["llada"], **CPU).model is not None  # prepack off loads


@pytest.mark.skipif(_ops_missing(), reason="this torch has no oneDNN prepacked linear ops")
def test_bfloat16_is_probed_in_its_own_dtype(tiny_dirs, monkeypatch):
    probed = []

    def vary(dtype):
        probed.append(dtype)
        return "bfloat16 rows differ" if dtype == torch.bfloat16 else None

    monkeypatch.setattr(prepack, "row_bits_vary", vary)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    with pytest.raises(ValueError, match="bfloat16 rows differ; load with prepack=False"):
        dllm.load(tiny_dirs["llada"], device="cpu", dtype="bfloat16", prepack=True)
    assert probed == [torch.bfloat16]  # not the float32 verdict


@pytest.mark.skipif(_ops_missing(), reason="this torch has no oneDNN prepacked linear ops")
def test_this_torch_is_refused_where_its_rows_vary(tiny_dirs):
    """On this machine: where the real probe finds a varying row, load refuses with its words;
    where it finds none, test_prepack.py's row-invariance test checks more shapes and counts."""
    varies = row_bits_vary(torch.float32)
    if varies is None:
        pytest.skip("this torch's oneDNN keeps a row's bits here (test_prepack.py checks it)")
    assert "other bits" in varies and torch.__version__ in varies
    with pytest.raises(ValueError, match="load with prepack=False"):
        dllm.load(tiny_dirs["llada"], prepack=True, **CPU)
