"""A module fixture's costly files made once per test run, not once per pytest-xdist worker.

``make test`` spreads a module's tests over the workers (``--dist load``), and each worker that
runs one of them runs the module's fixtures again: the tensor-parallel torchrun job of
tests/parallel/test_tensor_parallel.py ran twice in every suite run (25 s each on CI). Files made
here sit under the run's shared temporary folder, made by the first process that asks while the
others wait for them; a fixture then reads them the same way in every worker."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest
from filelock import FileLock  # a dependency of torch


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder ``name``, filled by ``make(folder)`` in the first process of this run to ask.

    Under xdist each worker's temporary root is a subfolder of the run's (``popen-gw0``), which
    they share; elsewhere (no xdist, or a pytest that a worker started and that inherited its
    environment) the run's own root is the folder, never the shared parent of every run's. A
    ``make`` that raises leaves the folder unfinished, so the next process to ask makes it again
    (and fails the same way)."""
    root = tmp_path_factory.getbasetemp()
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and root.name == f"popen-{worker}":  # not a run this worker's environment merely passed on
        root = root.parent
    folder, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            folder.mkdir(exist_ok=True)
            make(folder)
            done.touch()
    return folder
