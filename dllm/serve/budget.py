"""``memory_budget_mb`` at admission: a request is refused (400) when one of its rows alone could
never fit the budget, and the scheduler admits no more rows than the budget holds with every
batch it runs at once (the weights once, each batch's decode memory on top), so a batch never
fails its memory check at decode time, which would end every row in it with an error."""
from __future__ import annotations

from dllm.engine.config import GenerationConfig
from dllm.engine.memory import MIB, plan_memory

Shape = tuple[int, int]  # (prefix tokens, answer positions left), as in round_cost
CanvasSize = tuple[int, int]  # (rows, canvas length) of a running decode


def canvas_size(shapes: list[Shape]) -> CanvasSize:
    """The canvas rows of these shapes share: left-padded to the longest prefix, run to the
    longest remainder."""
    return len(shapes), max(p for p, _ in shapes) + max(r for _, r in shapes)


def fits(model, canvases: list[CanvasSize], config: GenerationConfig) -> bool:
    """Whether decodes of these canvas sizes, running at once, fit ``config.memory_budget_mb``
    (always, without one). ``model``: the torch module (``DiffusionLM.model``)."""
    if config.memory_budget_mb is None:
        return True
    plans = [plan_memory(model, rows, length, config) for rows, length in canvases if rows]
    if not plans:
        return True
    total = plans[0].model_bytes + sum(plan.decode_bytes for plan in plans)
    return total <= config.memory_budget_mb * MIB


def rows_that_fit(model, others: list[CanvasSize], base: list[Shape], waiting: list[Shape],
                  config: GenerationConfig) -> int:
    """How many of ``waiting`` (in order) may share a canvas with rows of the ``base`` shapes
    while the ``others`` decodes run, within the budget."""
    if config.memory_budget_mb is None:
        return len(waiting)
    count = len(waiting)
    while count and not fits(model, others + [canvas_size(base + waiting[:count])], config):
        count -= 1
    return count


def one_row_mib(model, prompt_length: int, config: GenerationConfig) -> float:
    """The planned peak (MiB) of one row of ``prompt_length`` prompt tokens decoded alone: a
    request whose row needs more than ``memory_budget_mb`` could never be served."""
    return plan_memory(model, 1, prompt_length + config.gen_length, config).total_bytes / MIB
