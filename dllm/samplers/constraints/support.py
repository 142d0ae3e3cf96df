"""Which decodes a constraint may join; any other one is refused with its reason.

Covered: every rule, every cache, sampling, ragged batches, block-causal families and the
pipelined mode, the candidate strategies (FreeDave and SSD verify the constrained base step,
LoPA's anchor and branches are constrained), the helper-verified ones (apd's mixture and guided's
helper choose, left to right, among the tokens that keep the canvas completable given the draft
before them), uniform-state decoding (sampling and acceptance on the allowed tokens, the final
canvas made a word), the stoppers (SchED / Prophet's all-in fill keeps what keeps the canvas
completable, EoTP cuts only where a word still fits), token editing (a rewrite of a decided token
goes through the same filter) and tensor parallelism (each rank decides the same canvas question
and masks its own vocabulary shard's columns)."""
from __future__ import annotations

# the strategies whose every commit keeps the canvas completable, drafted, verified and accepted
# tokens included (DecodeState.keep_completable, CanvasConstraints.allowed_ids); a new strategy
# joins this list with its test
COVERED_STRATEGIES = ("plain", "freedave", "lopa", "ssd", "apd", "guided", "uniform")


def unsupported_reasons(config) -> list[str]:
    """Why ``config`` cannot decode constrained rows (empty: it can). Each reason names the
    setting to change; nothing is ignored silently."""
    reasons = []
    if config.strategy not in COVERED_STRATEGIES:
        reasons.append(f"strategy {config.strategy!r} has not been made to keep a constrained canvas completable "
                       f"(it is not tested under one); use one of {', '.join(COVERED_STRATEGIES)}")
    return reasons


def check_supported(config) -> None:
    reasons = unsupported_reasons(config)
    if reasons:
        raise ValueError("structured output (regex / choice / json_schema / grammar) cannot run here: "
                         + "; ".join(reasons))
