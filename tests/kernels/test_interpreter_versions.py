"""Which triton and numpy pairs skip the interpreted kernel checks (issue 38's GPU image had
triton 3.6 with numpy 2.5, and the checks failed there with numpy 2.4 alike)."""
from __future__ import annotations

import pytest

from tests.kernels.kernel_subprocess import interpreter_unusable


@pytest.mark.parametrize("triton_version, numpy_version", [("3.6.0", "2.4.6"), ("3.6.0", "2.5.0"),
                                                           ("3.5.1", "2.4.0rc1"), ("3.6.0+git1234", "2.4.0")])
def test_triton_before_3_7_with_numpy_2_4_or_later_is_named(triton_version, numpy_version):
    reason = interpreter_unusable(triton_version, numpy_version)
    assert reason is not None and f"triton {triton_version}" in reason and f"numpy {numpy_version}" in reason
    assert "triton>=3.7" in reason


@pytest.mark.parametrize("triton_version, numpy_version", [("3.7.0", "2.4.6"), ("3.9.0", "2.5.0"),
                                                           ("3.6.0", "2.3.5"), ("3.0.0", "1.26.4")])
def test_pairs_whose_interpreter_converts_one_element_arrays_run(triton_version, numpy_version):
    assert interpreter_unusable(triton_version, numpy_version) is None
