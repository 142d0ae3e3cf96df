"""``kernel_version``: a model's modules swapped in place (``make_batch_invariant``) raise the
model's count, once per swap and only its own, so whatever captured the old kernels (the CUDA
graph runner) can tell its captures are stale without the models layer reaching up to it."""
from __future__ import annotations

from torch import nn

import dllm
from dllm.models.batch_invariant import InvariantLinear, make_batch_invariant
from dllm.models.kernel_version import kernel_version, modules_swapped

CPU = dict(device="cpu", dtype="float32")


def test_make_batch_invariant_raises_the_version_of_the_swapped_model_only(tiny_dirs):
    model = dllm.load(tiny_dirs["llada"], **CPU).model
    other = dllm.load(tiny_dirs["llada"], **CPU).model
    assert kernel_version(model) == 0 and kernel_version(other) == 0  # as loaded: never swapped
    q_proj = model.layers[0].attn.q_proj
    make_batch_invariant(model)
    assert type(q_proj) is nn.Linear and isinstance(model.layers[0].attn.q_proj, InvariantLinear)  # swapped
    assert kernel_version(model) == 1
    assert kernel_version(other) == 0
    make_batch_invariant(model)  # every call re-points the attentions: a swap again
    assert kernel_version(model) == 2


def test_modules_swapped_counts_on_any_module():
    module = nn.Sequential(nn.Linear(2, 2))
    assert kernel_version(module) == 0
    assert modules_swapped(module) == 1 and modules_swapped(module) == 2
    assert kernel_version(module) == 2 and kernel_version(module[0]) == 0
