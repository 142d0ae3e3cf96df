"""Certainty-forcing distillation (dParallel, Chen et al. 2025; code ``czg1225/dParallel``,
``LLaDA/llada_train.py`` and ``Dream/dream_train.py``).

The model is trained on its own answers (the teacher is the frozen starting model, decoding one
token per step), so it keeps its sampling trajectory, while the entropy of its predictions is
pushed down wherever it already predicts the trajectory's token: certainty reached in parallel
is what lets a threshold rule (``entropy_threshold``, dParallel's inference rule) commit many
tokens per step.

Masking, as the released code: with ``block`` (LLaDA's script, blocks of 32) each row draws a
block index k uniformly in [0, n // block] (n: its answer length); earlier blocks stay clean,
block k (the remainder of the answer when k is the last index) is masked i.i.d. at
p = (1 - 1e-3) * 0.5 + 1e-3, and every later token is masked without loss. Without ``block``
(Dream's script) the whole answer is the segment. Each row comes twice, the second copy masking
exactly the segment tokens the first leaves visible. Loss per copy: the mean cross-entropy over
its masked segment tokens plus ``weight`` (2 for LLaDA, 1 for Dream) times the mean entropy of
softmax(logits / 0.5) over those of them whose argmax is the target; the two copies' losses add.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

MASK_RATE = (1 - 1e-3) * 0.5 + 1e-3  # t fixed at 0.5, LLaDA's eps
TEMPERATURE = 0.5  # the entropy's softmax temperature


def certainty_forcing_masks(answer: Tensor, answer_start: int, block: int | None,
                            gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """(hidden, scored), both (2B, L), for rows (B, L) whose answers start at ``answer_start``:
    rows r and B + r hold complementary masks over row r's segment; ``hidden`` adds every
    answer token after the segment (masked in the input, never scored)."""
    B, L = answer.shape
    lengths = answer.sum(-1)  # (B,)
    col = torch.arange(L)[None, :] - answer_start  # answer index of each column
    if block is None:
        lo, hi = torch.zeros_like(lengths), lengths
    else:
        last = lengths // block  # the released draw: randint(0, n // block), the last one the remainder
        k = (torch.rand(B, generator=gen) * (last + 1)).long().clamp_max(last)
        lo = k * block
        hi = torch.where(k == last, lengths, lo + block)
    segment = answer & (col >= lo[:, None]) & (col < hi[:, None])
    after = answer & (col >= hi[:, None])
    first = segment & (torch.rand(B, L, generator=gen) < MASK_RATE)
    scored = torch.cat([first, segment & ~first])
    return scored | after.repeat(2, 1), scored


def certainty_forcing_loss(logits: Tensor, target: Tensor, scored: Tensor, weight: float) -> Tensor:
    """Sum over the two copies (halves of the batch) of mean cross-entropy over ``scored`` plus
    ``weight`` times the mean tempered entropy over the scored positions predicted right."""
    total = logits.new_zeros(())
    for half in (slice(0, logits.shape[0] // 2), slice(logits.shape[0] // 2, None)):
        mask = scored[half]
        if not bool(mask.any()):
            continue
        picked, goal = logits[half][mask], target[half][mask]  # (N, V), (N,)
        total = total + F.cross_entropy(picked, goal)
        probs = F.softmax(picked / TEMPERATURE, dim=-1)
        entropy = -(probs * torch.log(probs + 1e-12)).sum(-1)
        right = picked.argmax(-1) == goal
        total = total + weight * (entropy * right).sum() / right.sum().clamp_min(1)
    return total
