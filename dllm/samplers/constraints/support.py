"""Which decodes a constraint may join today; every other one is refused with its reason."""
from __future__ import annotations


def unsupported_reasons(config, tensor_parallel: bool) -> list[str]:
    """Why ``config`` cannot decode constrained rows (empty: it can). Each reason names the
    setting to change; nothing is ignored silently."""
    reasons = []
    if config.strategy != "plain":
        reasons.append(f"strategy {config.strategy!r} commits from draft states the constraint does not "
                       "check yet; use strategy='plain'")
    if config.stopper != "none":
        reasons.append(f"stopper {config.stopper!r} commits or cuts outside the rule's step; use stopper='none'")
    if config.edit_threshold is not None:
        reasons.append("token editing (edit_threshold) rewrites decided tokens; leave edit_threshold unset")
    if config.block_add_threshold is not None:
        reasons.append("the pipelined mode (block_add_threshold) is not covered; leave block_add_threshold unset")
    if tensor_parallel:
        reasons.append("under tensor parallelism each rank holds a vocabulary shard the mask does not "
                       "cover yet; run with tensor_parallel=1")
    return reasons


def check_supported(config, tensor_parallel: bool = False) -> None:
    reasons = unsupported_reasons(config, tensor_parallel)
    if reasons:
        raise ValueError("structured output (regex / choice / json_schema) cannot run here: " + "; ".join(reasons))
