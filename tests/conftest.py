"""Shared fixtures: tiny random checkpoints of each family, written once per session, and the
device the suite runs on.

The suite's device is ``--dllm-device`` or ``DLLM_TEST_DEVICE`` (default: cpu). It becomes
``DLLM_DEVICE`` (what ``device="auto"`` resolves to, in this process and in the commands tests
start), so every test that loads through ``dllm.load()`` / the CLI defaults is device-generic;
tests that pin ``device="cpu"`` (CPU-only oracles, gloo) stay on the CPU.
"""
from __future__ import annotations

import contextlib
import logging
import os

import pytest

os.environ.setdefault("DLLM_KERNELS", "auto")
# One intra-op thread per process unless the caller says otherwise: the suite's models are tiny, so
# a second thread buys little on an idle 2-core machine and thrashes on a busy one (two files took
# 4 min with one thread against over 17 with two while other jobs ran). The commands tests start
# inherit it, so a test comparing a subprocess's tokens with this process's compares like with like.
os.environ.setdefault("OMP_NUM_THREADS", "1")
TEST_DEVICE_ENV = "DLLM_TEST_DEVICE"


def pytest_addoption(parser):
    parser.addoption("--dllm-device", default=None,
                     help=f"device of the device-generic tests: cpu, cuda, cuda:N (default: ${TEST_DEVICE_ENV} or cpu)")


def pytest_configure(config):
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))  # in case torch was imported first
    device = config.getoption("--dllm-device") or os.environ.get(TEST_DEVICE_ENV) or "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise pytest.UsageError(f"test device {device!r} asked for, but this torch sees no CUDA device; "
                                f"unset {TEST_DEVICE_ENV} / --dllm-device to run the suite on the CPU")
    os.environ[TEST_DEVICE_ENV] = device
    os.environ["DLLM_DEVICE"] = device  # device="auto" (dllm.load's default) means the test device


@pytest.fixture(scope="session")
def test_device() -> str:
    """The device the device-generic tests run on ("cpu" unless asked otherwise)."""
    return os.environ[TEST_DEVICE_ENV]


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    """A test that runs a command in this process (``dllm serve``'s CLI sets torch's threads to the
    CPUs it may use) leaves the worker's thread count as it found it: a worker left at 2 threads
    beside the other worker on a 2-core CI machine spun its OpenMP threads against it, and
    tiny-op decodes ran over 100x slower (guided diffusion's tests took 100-200 s, 0.5 s alone)."""
    import torch

    before = torch.get_num_threads()
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)


@contextlib.contextmanager
def logger_kept(name: str):
    """The logger ``name``'s handlers, level and propagation as they were before the block."""
    logger = logging.getLogger(name)
    before = list(logger.handlers), logger.level, logger.propagate
    try:
        yield logger
    finally:
        logger.handlers[:] = before[0]
        logger.setLevel(before[1])
        logger.propagate = before[2]


@pytest.fixture(autouse=True)
def _keep_dllm_logger():
    """A test that runs a command in this process (``main([...])``) leaves the ``dllm`` logger as
    it found it: the command sets one handler on the stderr of that moment (a capture pytest closes
    after the test) and stops propagation, so every later test's dllm log record in the worker
    printed a '--- Logging error ---' traceback and never reached the root logger's handlers."""
    with logger_kept("dllm"):
        yield


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    """{"llada": dir, "dream": dir, "llada_sharded": dir, "dream_sharded": dir}."""
    from dllm.models.tiny import write_tiny_checkpoint

    root = tmp_path_factory.mktemp("tiny")
    return {
        "llada": write_tiny_checkpoint(root / "llada", "llada", seed=1),
        "dream": write_tiny_checkpoint(root / "dream", "dream", seed=2),
        "llada_sharded": write_tiny_checkpoint(root / "llada_sh", "llada", seed=3, num_shards=3),
        "dream_sharded": write_tiny_checkpoint(root / "dream_sh", "dream", seed=4, num_shards=2),
    }


@pytest.fixture(scope="session")
def tiny_models(tiny_dirs, test_device):
    """Loaded float32 models for the unsharded tiny checkpoints, on the test device."""
    import dllm

    return {name: dllm.load(tiny_dirs[name], device=test_device, dtype="float32") for name in ("llada", "dream")}
