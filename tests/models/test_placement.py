"""device="auto" / dtype="auto": CUDA when present (or $DLLM_DEVICE), the checkpoint's
torch_dtype, else bfloat16 on a GPU and float32 on the CPU; every command defaults to both.
The CUDA branch is checked by pretending CUDA is available, never by touching a GPU."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

import dllm
from dllm.cli.main import _subcommands, build_parser
from dllm.models import CheckpointError
from dllm.models.placement import auto_device, checkpoint_dtype, resolve_device, resolve_dtype


@pytest.fixture
def no_override(monkeypatch):
    monkeypatch.delenv("DLLM_DEVICE", raising=False)


@pytest.mark.parametrize("cuda, want", [(False, "cpu"), (True, "cuda")])
def test_auto_device_is_cuda_when_present(monkeypatch, no_override, cuda, want):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert auto_device() == torch.device(want)
    assert resolve_device("auto") == torch.device(want)
    assert resolve_device("AUTO") == torch.device(want)


def test_dllm_device_overrides_auto_and_is_checked(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("DLLM_DEVICE", "cpu")
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")  # an explicit device ignores the variable
    monkeypatch.setenv("DLLM_DEVICE", "gpu-please")
    with pytest.raises(ValueError, match="DLLM_DEVICE='gpu-please' is not a torch device"):
        resolve_device("auto")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("DLLM_DEVICE", "cuda")
    with pytest.raises(ValueError, match="DLLM_DEVICE='cuda' asked for, but this torch sees no CUDA"):
        resolve_device("auto")


def test_a_cuda_index_past_the_visible_devices_is_refused(monkeypatch):
    """cuda:N is checked against the devices this process sees (CUDA_VISIBLE_DEVICES renumbers
    them from 0) before any weight is read, naming the range; an index in range is kept."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device("cuda") == torch.device("cuda")  # no index: the current device
    with pytest.raises(ValueError, match=r"device 'cuda:2' asked for, but only 2 CUDA device\(s\) are visible; "
                                         r"use cuda:0 \.\. cuda:N-1"):
        resolve_device("cuda:2")


@pytest.mark.parametrize("device, declared, want", [
    ("cpu", None, torch.float32), ("cuda", None, torch.bfloat16),
    ("cpu", torch.bfloat16, torch.bfloat16), ("cuda", torch.float16, torch.float16),
])
def test_auto_dtype_prefers_the_checkpoint_then_the_device(device, declared, want):
    assert resolve_dtype("auto", device=torch.device(device), declared=declared) == want
    assert resolve_dtype("float32", device=torch.device(device), declared=declared) == torch.float32


def test_torchs_half_and_float_names_are_taken_as_vllm_and_lm_eval_take_them():
    """dllm.load(dtype="half") and lm-eval's dtype=float (its README's spelling) were refused
    though the CLI took --dtype half; other spellings are still named with the choices."""
    assert resolve_dtype("half") == torch.half == torch.float16
    assert resolve_dtype("float") == torch.float == torch.float32
    with pytest.raises(ValueError, match=r"dtype 'bf16' is not supported; use one of \['auto', 'float32'"):
        resolve_dtype("bf16")


def test_checkpoint_dtype_reads_both_config_spellings():
    assert checkpoint_dtype({}) is None
    assert checkpoint_dtype({"torch_dtype": "bfloat16"}) == torch.bfloat16
    assert checkpoint_dtype({"dtype": "float16"}) == torch.float16  # transformers 5 writes "dtype"
    assert checkpoint_dtype({"torch_dtype": "torch.float32"}) == torch.float32
    with pytest.raises(ValueError, match="torch_dtype='float64'.*pass dtype="):
        checkpoint_dtype({"torch_dtype": "float64"})


def _with_config(src, dst, **changes):
    shutil.copytree(src, dst)
    raw = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**raw, **changes}))
    return dst


def test_load_defaults_to_auto(tiny_dirs, tmp_path, monkeypatch, no_override):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    plain = dllm.load(tiny_dirs["llada"])
    assert plain.model.device == torch.device("cpu") and plain.model.dtype == torch.float32
    bf16 = dllm.load(_with_config(tiny_dirs["llada"], tmp_path / "bf16", torch_dtype="bfloat16"))
    assert bf16.model.dtype == torch.bfloat16  # the checkpoint's own dtype, not float32 on the CPU
    assert dllm.load(tmp_path / "bf16", dtype="float32").model.dtype == torch.float32
    odd = _with_config(tiny_dirs["llada"], tmp_path / "f64", torch_dtype="float64")
    with pytest.raises(CheckpointError, match="config.json.*torch_dtype='float64'"):
        dllm.load(odd)
    assert dllm.load(odd, dtype="bfloat16").model.dtype == torch.bfloat16  # explicit dtype: not read


def test_every_command_defaults_to_auto():
    parsers = [p for p in _subcommands(build_parser()) if any("--device" in a.option_strings for a in p._actions)]
    assert {p.prog.split()[-1] for p in parsers} >= {"generate", "parallelbench", "throughput", "train-filter"}
    for parser in parsers:
        defaults = {a.dest: a for a in parser._actions}
        assert defaults["device"].default == "auto" and defaults["dtype"].default == "auto", parser.prog
        assert "auto" in defaults["dtype"].choices


@pytest.mark.parametrize("family", ["llada", "fast_dllm_v2", "diffusion_gemma"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tiny_checkpoints_load_in_their_own_dtype_on_a_gpu(tmp_path, family, dtype):
    """A tiny checkpoint declares the dtype its tensors are stored in, so dtype="auto" on CUDA
    (the device-generic suite on a GPU) keeps float32 and the float32 tolerances of the tests that
    load one without a dtype; undeclared, CUDA's default made them bfloat16 there alone."""
    from dllm.models.tiny import write_tiny_checkpoint

    raw = json.loads((write_tiny_checkpoint(tmp_path, family, dtype=dtype) / "config.json").read_text())
    declared = checkpoint_dtype(raw)
    assert declared == dtype
    assert resolve_dtype("auto", device=torch.device("cuda", 0), declared=declared) == dtype
