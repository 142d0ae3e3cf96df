"""``dllm generate``'s bar of answer tokens waits ``BAR_DELAY_S`` before it is drawn: a decode
shorter than that writes nothing to the terminal, a longer one shows the bar."""
from __future__ import annotations

import sys
import time

from dllm.api.request import OutputRequest
from dllm.cli import progress
from dllm.engine.config import GenerationConfig


def _bar(monkeypatch, delay: float):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # a person watching
    monkeypatch.setattr(progress, "BAR_DELAY_S", delay)
    return progress.answer_bar(2, GenerationConfig(gen_length=16), OutputRequest.parse(max_tokens=10), quiet=False)


def test_a_short_decode_draws_no_bar(monkeypatch, capsys):
    bar = _bar(monkeypatch, 30.0)
    assert not bar.disable and bar.total == 2 * 10
    bar.update(20)
    bar.close()
    assert capsys.readouterr().err == ""


def test_a_decode_past_the_delay_draws_it(monkeypatch, capsys):
    bar = _bar(monkeypatch, 0.05)
    time.sleep(0.15)  # past the delay and tqdm's own 0.1 s between draws
    bar.update(20)
    bar.close()
    assert "generate" in capsys.readouterr().err
