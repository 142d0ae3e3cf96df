"""Which decodes a constraint may join today; every other one is refused with its reason.

Covered: every rule, every cache, sampling, ragged batches, block-causal families and the
pipelined mode, the candidate strategies (FreeDave and SSD verify the constrained base step,
LoPA's anchor and branches are constrained) and the stoppers (SchED / Prophet's all-in fill keeps
what keeps the canvas completable, EoTP cuts only where a word still fits), and token editing
(a rewrite of a decided token goes through the same filter), and tensor parallelism (each rank
decides the same canvas question and masks its own vocabulary shard's columns)."""
from __future__ import annotations

# the strategies whose every commit goes through the constraint's filter, drafted and verified
# states included (DecodeState.keep_completable); a new strategy joins this list with its test
COVERED_STRATEGIES = ("plain", "freedave", "lopa", "ssd")


def unsupported_reasons(config) -> list[str]:
    """Why ``config`` cannot decode constrained rows (empty: it can). Each reason names the
    setting to change; nothing is ignored silently."""
    reasons = []
    if config.strategy not in COVERED_STRATEGIES:
        reasons.append(f"strategy {config.strategy!r} commits tokens that are not a masked rule step's (a helper's "
                       "accepted prefix, a re-noised canvas), which the constraint does not check; use one of "
                       f"{', '.join(COVERED_STRATEGIES)}")
    return reasons


def check_supported(config) -> None:
    reasons = unsupported_reasons(config)
    if reasons:
        raise ValueError("structured output (regex / choice / json_schema / grammar) cannot run here: "
                         + "; ".join(reasons))
