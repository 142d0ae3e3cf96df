"""The token a left-to-right verifier (apd's mixture, guided's helper) would choose at each
window position, under each row's constraint.

Unconstrained, it is the argmax of the verifier's scores. A constrained row's verifier chooses
among the ids that keep the canvas completable given the draft before the position (the
decided answer, the draft's tokens before it, holes after: ``CanvasConstraints.allowed_ids``),
so the prefix a strategy accepts (draft tokens the verifier would choose, then the verifier's own
choice) is made of tokens each of which keeps the canvas completable: it is the constrained
verifier's left-to-right decode. Columns are asked one at a time, from the window's first
position and only while the draft agrees (a row stops at its first disagreement: nothing after it
is committed), so a round makes at most one canvas check more than the tokens it commits.
"""
from __future__ import annotations

import torch
from torch import Tensor


def verifier_choice(state, scores: Tensor, draft: Tensor, window: Tensor, first: Tensor, *,
                    keep_first: bool = False) -> Tensor:
    """(B, W') the verifier's token at each of the first W' window columns.

    ``scores`` (B, W', V'): the verifier's logits over ids below V'; ``draft`` (B, W) the
    diffusion model's draft; ``window`` (B, W) the columns the strategy may commit, starting at
    ``first`` (B,); ``keep_first``: the strategy commits the draft at ``first`` whatever the
    verifier chooses (apd), so the check goes on past it. Past a constrained row's first
    disagreement the values are the unconstrained argmax (the strategy commits nothing there)."""
    choice = scores.argmax(-1)
    constraints = state.constraints
    if constraints is None:
        return choice
    B, width = scores.shape[:2]
    constrained = torch.tensor([row is not None for row in constraints.rows], device=draft.device)
    going = window.any(-1) & constrained  # (B,) rows whose next column is asked
    col = first.clone()
    candidates = state.tokens.clone()  # the canvas with the draft's prefix accepted so far
    while bool(going.any()):
        rows = going.nonzero().flatten()
        at = col[rows]
        allowed = constraints.allowed_ids(state, candidates[rows], rows, at, scores.shape[-1])  # (n, V')
        if not bool(allowed.any(-1).all()):
            raise RuntimeError(f"strategy {state.config.strategy!r}: the verifier's vocabulary ({scores.shape[-1]} "
                               "ids) holds none of the tokens the constraint allows here")
        pick = scores[rows, at].masked_fill(~allowed, float("-inf")).argmax(-1)  # (n,)
        choice[rows, at] = pick
        taken = draft[rows, at]
        agree = (pick == taken) | (keep_first & (at == first[rows]))
        candidates[rows, state.bs + at] = taken
        col[rows] = at + 1
        nxt = (at + 1).clamp_max(width - 1)
        going[rows] = agree & (at + 1 < width) & window[rows, nxt]
    return choice
