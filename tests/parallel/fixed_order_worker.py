"""One torchrun rank of the fixed-order all-reduce test (``test_fixed_order_reduce.py``): sums
loads a tiny model with ``tensor_parallel=WORLD_SIZE, batch_invariant=True`` (which forms the
group) and decodes, then sums each rank's part of a (rows, width) batch with
``TensorShard(fixed_order=True)``, the whole batch and slices of it (a row alone, a few rows,
many); rank 0 saves everything (``torch.save``) to OUT for the test to check against its own sums.

Usage: python -m torch.distributed.run --nproc_per_node N tests/parallel/fixed_order_worker.py MODEL OUT
"""
from __future__ import annotations

import os
import sys

import torch

ROWS, WIDTH = 257, 96
SLICES = [(0, 1), (5, 6), (0, 3), (5, 70), (0, ROWS)]  # rows [lo, hi): alone, a few, many, the whole batch
PROMPTS = ["copy the list [a, b, c]", "sort these names: bob, al, cy"]
GEN = dict(gen_length=16, block_length=8, steps=16, stop_at_eos=False)


def part_of(rank: int) -> torch.Tensor:
    """Rank ``rank``'s (ROWS, WIDTH) float32 part: magnitudes spread over 2^-8..2^8, signs mixed,
    so that the order of a sum of parts shows in the last bits."""
    g = torch.Generator().manual_seed(1000 + rank)
    return torch.randn(ROWS, WIDTH, generator=g) * torch.exp2(torch.randint(-8, 9, (ROWS, WIDTH), generator=g).float())


def run(model_dir: str, out: str) -> None:
    import dllm
    from dllm import GenerationConfig
    from dllm.parallel.dist import leave_together, run_rank
    from dllm.parallel.tensor_plan import TensorShard

    size = int(os.environ["WORLD_SIZE"])

    def body(rank: int) -> None:
        model = dllm.load(model_dir, device="cpu", dtype="float32", tensor_parallel=size, batch_invariant=True)
        got = model.generate(PROMPTS, GenerationConfig(**GEN))
        result = {"model": {"fixed_order": model.model.tensor_parallel.fixed_order, "token_ids": got.token_ids}}
        shard, x = TensorShard(rank=rank, size=size, fixed_order=True), part_of(rank)  # the world: the load's group
        result["fixed"] = {(lo, hi): shard.all_reduce(x[lo:hi].clone()) for lo, hi in SLICES}
        if rank == 0:
            torch.save(result, out)

    run_rank(body)
    leave_together()


if __name__ == "__main__":
    torch.set_num_threads(1)
    run(sys.argv[1], sys.argv[2])
