"""``dllm bench serve`` benchmarks the model it was given: every model option it accepts reaches the
command line of the server it starts (a LoRA adapter, a helper), so the server decodes the model
the soak's single runs are computed with."""
from __future__ import annotations

from unittest import mock

import pytest

from dllm.bench import serve_load
from dllm.cli import build_parser, main


@pytest.mark.parametrize("mode", [["--modes", "continuous"], ["--soak", "1"]])
def test_the_started_server_gets_the_adapter_and_the_helper(tmp_path, monkeypatch, mode):
    adapter, helper = str(tmp_path / "adapter"), str(tmp_path / "helper")
    popen = mock.Mock(side_effect=RuntimeError("not started in tests"))
    monkeypatch.setattr(serve_load.subprocess, "Popen", popen)
    with pytest.raises(RuntimeError, match="not started"):
        main(["bench", "serve", "--out", str(tmp_path / "out"), "--adapter", adapter, "--helper", helper,
              "--rates", "1", *mode])
    cmd = popen.call_args.args[0]
    served = build_parser().parse_args(cmd[cmd.index("serve"):])  # as `dllm serve` reads its command line
    assert (served.adapter, served.helper) == (adapter, helper)
