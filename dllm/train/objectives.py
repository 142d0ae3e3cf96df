"""Training objectives: which answer tokens are masked, and which predictions are scored.

* ``llada``: t ~ U(0, 1); every answer token (answer + end-of-text padding) masked i.i.d. with
  p = (1 - 1e-3) t + 1e-3 (LLaDA SFT; Dream the same with its logit shift).
* ``name_part_masks`` (an option on top of ``llada``): a share of rows also masks every token of
  one class drawn per row (every first name, or every last name), so the visible half of each
  person's name is the evidence for the masked half.
* ``block_diffusion`` (Fast-dLLM v2): the answer is cut into blocks of ``bd_size``; each row
  noises one block drawn uniformly, with every earlier block clean, and comes twice in the
  batch with complementary masks (each token of the block masked in exactly one copy), so no
  token of the drawn block goes unscored. Under block-causal attention later blocks are
  invisible to the drawn one; they carry no loss.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor


def llada_masks(answer: Tensor, gen: torch.Generator) -> Tensor:
    """(B, L) masked positions: answer tokens at a per-row rate t."""
    t = torch.rand(answer.shape[0], 1, generator=gen)
    p_mask = (1 - 1e-3) * t + 1e-3
    return answer & (torch.rand(answer.shape, generator=gen) < p_mask)


def name_part_masks(tokens: Tensor, answer: Tensor, classes: Sequence[Tensor], rate: float,
                    gen: torch.Generator) -> Tensor:
    """(B, L) extra masked positions: in a share ``rate`` of rows, every answer token of one of
    ``classes`` (id tensors, e.g. first-name and last-name tokens; one drawn per row). OR-ed
    with ``llada_masks``, it makes the state where a person's first name is visible and the last
    name masked (or the reverse) common: there a model that copies by list position, which
    copy / reverse / index tasks reward, fails on shuffle / insert-at-random, and only binding
    the two names of one person (look the visible one up in the prompt) predicts the other."""
    B = tokens.shape[0]
    use = torch.rand(B, generator=gen) < rate
    chosen = torch.randint(len(classes), (B,), generator=gen)
    extra = torch.zeros_like(answer)
    for c, ids in enumerate(classes):
        extra |= (chosen == c)[:, None] & torch.isin(tokens, ids)
    return extra & answer & use[:, None]


def block_diffusion_masks(answer: Tensor, answer_start: int, bd_size: int, gen: torch.Generator) -> Tensor:
    """(2B, L) masked positions for rows (B, L) whose answers start at column ``answer_start``:
    rows r and B + r noise the same drawn block with complementary masks."""
    B, L = answer.shape
    lengths = answer.sum(-1)  # answer + padding tokens per row (a multiple of bd_size)
    if bool((lengths % bd_size).any()):
        raise ValueError(f"answer lengths {lengths.tolist()} are not multiples of bd_size {bd_size}")
    block = (torch.rand(B, generator=gen) * (lengths // bd_size)).long()  # (B,)
    col = torch.arange(L)
    lo = answer_start + block * bd_size
    in_block = (col[None, :] >= lo[:, None]) & (col[None, :] < (lo + bd_size)[:, None])
    first = llada_masks(in_block, gen)
    return torch.cat([first, in_block & ~first])
