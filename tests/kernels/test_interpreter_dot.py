"""The premise of the interpreted row checks (kernel_subprocess.kernel_env): under the environment
they run in, numpy's matmul of a tile gives a row the same bits at any row position, as a GPU's MMA
does, so a row check that fails there points at the kernel's order, not at the emulator."""
from __future__ import annotations

import subprocess
import sys

from tests.kernels.kernel_subprocess import REPO, kernel_env

CHECK = """
import numpy as np
rng = np.random.default_rng(0)
for m, k, n in ((32, 64, 32), (16, 100, 70), (64, 32, 16)):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    full = a @ b
    for at in range(m):
        alone = np.zeros_like(a)
        alone[0] = a[at]
        assert np.array_equal((alone @ b)[0], full[at]), (m, k, n, at)
print("ROWS-OK")
"""


def test_the_interpreters_matmul_gives_a_row_its_bits_at_any_position():
    done = subprocess.run([sys.executable, "-c", CHECK], env=kernel_env(interpret=True), cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "ROWS-OK" in done.stdout, done.stdout + done.stderr[-3000:]
