"""A commit's logprobs read back with the ``top`` alternatives asked for (up to those recorded),
the log-softmax of the committing forward's logits, most likely first."""
from __future__ import annotations

import math

import torch

from dllm.engine.logprobs import CommitLogprobs


def test_read_gives_the_top_asked_for_of_those_recorded():
    logits = torch.tensor([[[0.0, 1.0, 2.0, 3.0], [3.0, 0.0, 0.0, 1.0]]])  # (1, 2, V=4)
    record = CommitLogprobs(1, 2, top=3, device=torch.device("cpu"))
    record.saw(logits, None, 1)
    record.committed(torch.tensor([[True, True]]), torch.tensor([[2, 0]]), offset=0)
    norm = [math.log(sum(math.exp(x) for x in row)) for row in ([0, 1, 2, 3], [3, 0, 0, 1])]
    first, second = record.read(0, 0, 2, top=1)
    assert math.isclose(first.logprob, 2 - norm[0], rel_tol=1e-6) and math.isclose(second.logprob, 3 - norm[1], rel_tol=1e-6)
    assert [i for i, _ in first.top] == [3] and [i for i, _ in second.top] == [0]
    assert len(record.read(0, 0, 1, top=3)[0].top) == 3
    assert record.read(0, 0, 1, top=0)[0].top == []
