"""select="read" refreshes the fewest reused keys that cover the asked share of the window's
attention: a key of no mass is never taken (not even at cover 1, where float32's cumulative sum
can fall just short of the row's total), nor a position that is not a candidate."""
from __future__ import annotations

import torch

from dllm.cache.read_refresh import _covering

# float32: the cumulative sum over these three ends one ulp below the row's sum
MASS = [0.8352431654930115, 0.2055988311767578, 0.593172013759613, 0.0, 0.0, 0.0]


def test_cover_one_takes_the_read_keys_alone():
    mass = torch.tensor([MASS])
    slots, take = _covering(mass, torch.ones(1, 6, dtype=torch.bool), cover=1.0, most=1.0)
    assert slots.tolist() == [[0, 2, 1]] and take.tolist() == [[True, True, True]]
    candidates = torch.tensor([[True, True, True, False, True, False]])  # the window, padding: no candidates
    slots, take = _covering(torch.tensor([[0.2, 0.5, 0.3, 0.9, 0.0, 0.4]]), candidates, cover=1.0, most=1.0)
    assert sorted(s for s, t in zip(slots[0].tolist(), take[0].tolist()) if t) == [0, 1, 2]


def test_cover_and_most_bound_the_choice():
    mass = torch.tensor([[0.5, 0.3, 0.2, 0.0]])
    every = torch.ones(1, 4, dtype=torch.bool)
    assert _covering(mass, every, cover=0.5, most=1.0)[0].tolist() == [[0]]  # 0.5 reaches half
    assert _covering(mass, every, cover=0.6, most=1.0)[0].tolist() == [[0, 1]]
    assert _covering(mass, every, cover=1.0, most=0.4)[0].tolist() == [[0, 1]]  # at most ceil(4 * 0.4)
