"""The grammar check pauses Python's cyclic collector while it builds and walks a chart: paused
inside, back to its earlier state afterwards (on an exception too, and after nested calls only
once the outermost returns), and a collector the caller turned off stays off."""
from __future__ import annotations

import gc

import pytest

from dllm.samplers.constraints.cfg_canvas import collector_paused


@pytest.fixture
def enabled_after():
    was = gc.isenabled()
    yield
    gc.enable() if was else gc.disable()


def test_paused_inside_and_restored_after(enabled_after):
    gc.enable()
    seen = []

    @collector_paused
    def inner():
        seen.append(gc.isenabled())

    @collector_paused
    def outer(fail: bool):
        inner()  # a nested paused call returns: the outer one is still paused
        seen.append(gc.isenabled())
        if fail:
            raise KeyError("boom")
        return 7

    assert outer(False) == 7
    assert seen == [False, False] and gc.isenabled()
    with pytest.raises(KeyError):
        outer(True)
    assert gc.isenabled()


def test_a_collector_turned_off_stays_off(enabled_after):
    gc.disable()
    collector_paused(lambda: None)()
    assert not gc.isenabled()
