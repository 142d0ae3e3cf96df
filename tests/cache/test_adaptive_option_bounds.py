"""The adaptive cache's options at their bounds: from_layer may be the last layer and no deeper,
cover and most may be the whole share (1), drift 0 refreshes always."""
from __future__ import annotations

import pytest

from dllm.cache.adaptive import AdaptiveOptions


def test_from_layer_ends_at_the_last_layer():
    AdaptiveOptions(from_layer=3).check(4)
    with pytest.raises(ValueError, match="from_layer=4 but the model has 4 layers; choose from_layer < 4"):
        AdaptiveOptions(from_layer=4).check(4)


def test_whole_shares_and_zero_drift_are_accepted():
    AdaptiveOptions(cover=1, most=1.0, ratio=1, drift=0).check(4)
    for name in ("cover", "most", "ratio"):
        with pytest.raises(ValueError, match=f"{name} must be a"):
            AdaptiveOptions(**{name: 1.01}).check(4)
