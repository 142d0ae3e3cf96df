"""The process groups of a torchrun job: tensor-parallel groups times data- or branch-parallel groups.

A job of W processes with tensor-parallel size T holds W / T copies of the model, each split over
a *tensor group* of T neighbouring ranks (g*T .. g*T + T - 1: on GPUs, the fastest links). The
copies then split the work as one process each would: data parallel deals prompts to the groups,
branch parallel deals candidates. What crosses copies runs in a *peer group*: the W / T ranks that
hold the same shard (same tensor rank), so branch parallel's all-gather pairs each shard with
its counterparts, and every rank of a copy still takes part in every collective of its copy.

Groups form once per job and size (``torch.distributed.new_group`` is collective: every rank
forms every group in the same order) and are shared by everything that asks for them: the
loader's ``TensorShard`` and the command that deals out the work.
"""
from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from dllm.parallel.dist import DistContext, init_distributed
from dllm.parallel.tensor_plan import TensorPlanError, TensorShard


@dataclass(frozen=True, kw_only=True, slots=True)
class Layout:
    """One rank's place in a job of ``world_size`` processes split into tensor groups of
    ``tensor_size``. ``tensor_group`` / ``peer_group``: torch.distributed groups; None is the whole
    world (one copy: its tensor group; tensor size 1: the peers), or unused (a copy of one rank
    needs no tensor group, a single copy no peer group)."""

    rank: int
    world_size: int
    tensor_size: int
    tensor_group: object = None
    peer_group: object = None

    @property
    def groups(self) -> int:
        """Copies of the model: the data- or branch-parallel width."""
        return self.world_size // self.tensor_size

    @property
    def group_index(self) -> int:
        """Which copy this rank belongs to (its data- or branch-parallel rank)."""
        return self.rank // self.tensor_size

    @property
    def tensor_rank(self) -> int:
        """Which shard of its copy this rank holds."""
        return self.rank % self.tensor_size

    @property
    def leads(self) -> bool:
        """The rank that speaks for its copy (writes its rows): tensor rank 0."""
        return self.tensor_rank == 0


def launched_world() -> int:
    """The torchrun job's process count (1 outside torchrun), known before the group forms."""
    return int(os.environ.get("WORLD_SIZE", "1")) if "RANK" in os.environ else 1


def check_layout(tensor_size: int, world_size: int | None = None, *, whole_world: bool = False) -> None:
    """Refuse a tensor-parallel size the job's process count does not allow, naming the launch
    that fits (before the group forms and before any weight is read). ``whole_world``: the
    command runs one copy only (the server), so the job must have exactly ``tensor_size`` processes."""
    world = launched_world() if world_size is None else world_size
    if tensor_size == 1 or world == tensor_size:
        return
    if world == 1:
        raise TensorPlanError(f"tensor_parallel={tensor_size} needs {tensor_size} processes: launch it with "
                              f"torchrun --nproc_per_node {tensor_size} (a dllm command: torchrun --nproc_per_node "
                              f"{tensor_size} -m dllm COMMAND ...; dllm starts no processes of its own)")
    if whole_world:
        raise TensorPlanError(f"tensor_parallel={tensor_size} runs one copy of the model on exactly {tensor_size} "
                              f"processes, this job has {world}: launch it with torchrun --nproc_per_node "
                              f"{tensor_size}")
    if world % tensor_size:
        raise TensorPlanError(f"tensor_parallel={tensor_size} splits the job into groups of {tensor_size} "
                              f"processes, but it has {world}: launch torchrun with --nproc_per_node a multiple "
                              f"of {tensor_size} (e.g. {tensor_size} or {2 * tensor_size})")


_LAYOUTS: dict[int, Layout] = {}


def join_groups(tensor_size: int, device: str = "auto", timeout_s: float = 120.0) -> tuple[Layout, DistContext]:
    """This rank's ``Layout`` (the job's groups formed on first use) and its ``DistContext``."""
    check_layout(tensor_size)
    ctx = init_distributed(device, timeout_s=timeout_s)
    layout = _LAYOUTS.get(tensor_size)
    if layout is None:
        layout = _LAYOUTS[tensor_size] = _form(ctx, tensor_size, timeout_s)
    return layout, ctx


def _form(ctx: DistContext, size: int, timeout_s: float) -> Layout:
    world, groups = ctx.world_size, ctx.world_size // size
    if size == 1 or groups == 1:  # one kind of group only: it is the whole world
        return Layout(rank=ctx.rank, world_size=world, tensor_size=size)
    timeout = datetime.timedelta(seconds=timeout_s)
    mine = {}
    for g in range(groups):  # every rank forms every group, in this order
        group = dist.new_group(list(range(g * size, (g + 1) * size)), timeout=timeout)
        if ctx.rank // size == g:
            mine["tensor"] = group
    for t in range(size):
        group = dist.new_group(list(range(t, world, size)), timeout=timeout)
        if ctx.rank % size == t:
            mine["peer"] = group
    return Layout(rank=ctx.rank, world_size=world, tensor_size=size, tensor_group=mine["tensor"],
                  peer_group=mine["peer"])


def join_tensor_group(size: int, device: str = "auto") -> tuple[TensorShard, torch.device]:
    """This rank's shard of its tensor-parallel group in a torchrun job (initialising
    torch.distributed); a job of more processes than ``size`` holds one group per ``size`` ranks
    (composed with data or branch parallelism)."""
    layout, ctx = join_groups(size, device)
    return TensorShard(rank=layout.tensor_rank, size=size, group=layout.tensor_group), ctx.device
