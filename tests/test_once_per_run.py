"""tests/once_per_run.py: which folder a run's workers share, and that its files are made once."""
from __future__ import annotations

from pathlib import Path

from tests.once_per_run import once_per_run


class _Factory:
    """A stand-in for pytest's tmp_path_factory with a given base folder."""

    def __init__(self, base: Path) -> None:
        self.base = base

    def getbasetemp(self) -> Path:
        return self.base


def test_workers_of_a_run_share_its_folder_and_make_once(tmp_path, monkeypatch):
    made = []
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        base = tmp_path / "pytest-7" / f"popen-{worker}"
        base.mkdir(parents=True)
        folder = once_per_run(_Factory(base), "job", made.append)
        assert folder == tmp_path / "pytest-7" / "job"
    assert made == [tmp_path / "pytest-7" / "job"]


def test_a_pytest_that_inherited_a_workers_environment_keeps_to_its_own_folder(tmp_path, monkeypatch):
    """A pytest a worker starts (or a worker without xdist's popen-gwN folder) inherits
    PYTEST_XDIST_WORKER; its folder is its own run's, not the parent every run shares, where a
    .done file would hand the next run another run's outputs."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    base = tmp_path / "pytest-of-someone" / "pytest-3"
    base.mkdir(parents=True)
    assert once_per_run(_Factory(base), "job", lambda folder: None) == base / "job"
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert once_per_run(_Factory(base), "job2", lambda folder: None) == base / "job2"
