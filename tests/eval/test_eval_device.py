"""``python -m dllm.eval --model dllm`` without ``--device`` runs on dllm's ``auto`` device (lm-eval
would pass its own ``cuda:0``), while a device the user names is still checked."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")
from lm_eval._cli import HarnessCLI  # noqa: E402

from dllm.eval.__main__ import default_device_auto  # noqa: E402
from dllm.eval.lm_eval import DllmLM  # noqa: E402
from dllm.models.placement import auto_device  # noqa: E402

TASKS = Path(__file__).resolve().parent / "tasks"
REPO = Path(__file__).resolve().parents[2]


def _device_after(monkeypatch, *argv: str) -> str | None:
    monkeypatch.setattr(sys, "argv", ["lm-eval", *argv])
    args = HarnessCLI().parse_args()
    default_device_auto(args)
    return args.device


def test_only_an_unnamed_device_of_the_dllm_model_becomes_auto(monkeypatch, tmp_path):
    assert _device_after(monkeypatch, "--model", "dllm", "--tasks", "t") == "auto"
    assert _device_after(monkeypatch, "run", "--model", "dllm", "--tasks", "t") == "auto"
    assert _device_after(monkeypatch, "--model", "dllm", "--tasks", "t", "--device", "cuda:0") == "cuda:0"
    assert _device_after(monkeypatch, "--model", "hf", "--tasks", "t") is None  # other models: lm-eval's way
    config = tmp_path / "c.yaml"
    config.write_text("model: dllm\ndevice: cuda:1\n")
    assert _device_after(monkeypatch, "--config", str(config), "--tasks", "t") is None  # the YAML names one
    config.write_text("model: dllm\n")
    assert _device_after(monkeypatch, "--config", str(config), "--tasks", "t") == "auto"


def test_the_model_loads_on_the_auto_device(tiny_dirs):
    lm = DllmLM(pretrained=str(tiny_dirs["llada"]), device="auto")
    assert lm.device == auto_device() and lm.model.device.type == auto_device().type
    assert DllmLM(pretrained=str(tiny_dirs["llada"])).device == auto_device()  # simple_evaluate without device


def _eval(tiny_dirs, tmp_path, *extra: str) -> subprocess.CompletedProcess:
    """The command line on a machine without CUDA (none visible, no $DLLM_DEVICE)."""
    env = {k: v for k, v in os.environ.items() if k != "DLLM_DEVICE"}
    env.update(CUDA_VISIBLE_DEVICES="", HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO),
               HF_DATASETS_CACHE=str(tmp_path / "hf"))
    command = [sys.executable, "-m", "dllm.eval", "--model", "dllm", "--model_args",
               f"pretrained={tiny_dirs['llada']},greedy_check=false", "--tasks", "dllm_reverse_gen",
               "--include_path", str(TASKS), "--limit", "1", *extra]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


def test_no_device_runs_without_cuda(tiny_dirs, tmp_path):
    done = _eval(tiny_dirs, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "dllm_reverse_gen" in done.stdout


def test_a_named_cuda_device_without_cuda_is_an_error_naming_the_fix(tiny_dirs, monkeypatch):
    """What the command line hands on for ``--device cuda:0`` (kept as named, checked above),
    on a machine without CUDA: refused before loading, naming --device cpu."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"device 'cuda:0' is not available on this machine \(no CUDA\); pass --device cpu"):
        DllmLM(pretrained=str(tiny_dirs["llada"]), device="cuda:0")


def test_each_rank_of_an_eval_job_loads_on_its_local_gpu(monkeypatch):
    """Under torchrun a rank loads on cuda:LOCAL_RANK whatever --device names (cuda, cuda:0,
    auto), so the copies never share one GPU; outside a job the named device is kept."""
    import torch

    from dllm.eval.lm_eval import _device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("DLLM_DEVICE", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert [_device(d, 7) for d in ("cuda", "cuda:0", "auto")] == ["cuda:3"] * 3
    assert _device("cpu", 7) == "cpu"
    assert _device("cuda:1", None) == "cuda:1" and _device("auto", None) == "cuda"
    monkeypatch.delenv("LOCAL_RANK")
    assert _device("cuda", 2) == "cuda:2"
