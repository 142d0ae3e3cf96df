"""``dllm serve``'s torch threads: --threads, else OMP_NUM_THREADS (as torch and every other command
read it), else the CPUs the process may run on; a malformed OMP_NUM_THREADS is refused by name."""
from __future__ import annotations

import argparse
import os

import pytest
import torch

from dllm.serve.serve_options import torch_threads


def _args(threads=None) -> argparse.Namespace:
    return argparse.Namespace(threads=threads)


def test_omp_num_threads_sets_the_servers_threads(monkeypatch):
    wanted = len(os.sched_getaffinity(0)) + 1  # not the CPU count, which the server took before
    monkeypatch.setenv("OMP_NUM_THREADS", str(wanted))
    assert torch_threads(_args()) == wanted and torch.get_num_threads() == wanted


def test_threads_flag_wins_over_omp_num_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert torch_threads(_args(threads=2)) == 2 and torch.get_num_threads() == 2


def test_without_either_the_server_takes_the_cpus_it_may_run_on(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert torch_threads(_args()) == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("value", ["0", "4,2", "two", "-1"])
def test_a_malformed_omp_num_threads_is_refused_naming_the_fix(monkeypatch, value):
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    with pytest.raises(ValueError, match="OMP_NUM_THREADS.*not a positive thread count.*--threads"):
        torch_threads(_args())
