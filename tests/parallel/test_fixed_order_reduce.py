"""The fixed-order all-reduce of ``load(batch_invariant=True)`` under tensor parallelism (issue 39),
at 4 ranks on gloo (from 3 ranks on the order of a sum shows in its bits): the result is the
rank-order sum of the parts, computed here from the parts themselves, bit for bit; a row's sum has
the same bits alone and inside any larger batch; a model loaded with the option uses it and
decodes one process's tokens. One torchrun job (``fixed_order_worker.py``)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import dllm
from dllm import GenerationConfig
from dllm.models.tiny import write_tiny_checkpoint
from dllm.parallel.tensor_plan import rank_order_sum
from tests.parallel.fixed_order_worker import GEN, PROMPTS, SLICES, part_of
from torchrun_helpers import torchrun

WORKER = Path(__file__).with_name("fixed_order_worker.py")
SIZE = 4


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("fixed-order")
    model = write_tiny_checkpoint(root / "llada", "llada", seed=11)  # 4 heads, MLP 128: divides by 4
    done = torchrun([str(WORKER), str(model), str(root / "out.pt")], SIZE, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return model, torch.load(root / "out.pt")


def _expected(lo: int, hi: int) -> torch.Tensor:
    """((x_0 + x_1) + x_2) + x_3 over rows [lo, hi), from the ranks' parts."""
    parts = [part_of(r)[lo:hi] for r in range(SIZE)]
    out = parts[0].clone()
    for part in parts[1:]:
        out = out + part
    return out


def test_fixed_order_is_the_rank_order_sum_bit_for_bit(job):
    _, result = job
    for (lo, hi), got in result["fixed"].items():
        assert torch.equal(got, _expected(lo, hi)), (lo, hi)
    # the order matters for these parts: another order rounds differently somewhere
    parts = [part_of(r) for r in range(SIZE)]
    assert not torch.equal(_expected(0, len(parts[0])), ((parts[3] + parts[2]) + parts[1]) + parts[0])


def test_a_row_sums_to_the_same_bits_alone_and_in_any_batch(job):
    _, result = job
    fixed = result["fixed"]
    whole = fixed[SLICES[-1]]
    for lo, hi in SLICES:
        assert torch.equal(fixed[lo, hi], whole[lo:hi]), (lo, hi)


def test_a_model_loaded_batch_invariant_reduces_in_fixed_order_and_decodes_one_process_tokens(job):
    model, result = job
    assert result["model"]["fixed_order"] is True
    single = dllm.load(model, device="cpu", dtype="float32").generate(PROMPTS, GenerationConfig(**GEN))
    assert result["model"]["token_ids"] == single.token_ids


def test_rank_order_sum_adds_in_rank_order():
    """The helper itself: left to right, one rounding per add (1 + 2^-24 + 2^-24 rounds twice to 1;
    the other order keeps 2^-23)."""
    tiny = torch.tensor([2.0 ** -24])
    got = rank_order_sum([torch.tensor([1.0]), tiny.clone(), tiny.clone()])
    assert got.item() == 1.0
    assert rank_order_sum([tiny.clone(), tiny.clone(), torch.tensor([1.0])]).item() == 1.0 + 2.0 ** -23
