"""The plain strategy: one forward, one rule step (then the stopper may commit more)."""
from __future__ import annotations

from dataclasses import dataclass

from dllm.samplers.base import register_strategy


@register_strategy("plain")
@dataclass(kw_only=True, slots=True)
class Plain:
    candidate_rows = 1  # rows one canvas row occupies in a forward (dllm.engine.memory)

    def step(self, state) -> None:
        # rules and stoppers that read masked positions only let the LM head skip the others
        logits = state.block_logits(head_rows=state.eligible() if state.reads_eligible_only else None)
        stats = state.statistics(logits)
        commit = state.rule(state.rule_input(stats))
        commit = state.stopper(state, stats, commit)
        if state.editing:  # before this step's commits: what editing may rewrite, and in which rows
            decided, moving = ~state.eligible(), state.moving_rows()
        state.commit(commit, stats.token)
        if state.editing:
            state.edit(decided & moving[:, None], stats)
