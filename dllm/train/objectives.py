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
* ``block_diffusion_copies`` (Fast-dLLM v2's and BD3-LM's released training, their "vectorized"
  layout): every answer block is trained in one forward. A row is laid out as its clean prompt +
  answer, then two noisy copies of the answer with complementary masks (each block at its own
  rate), at the clean answer's positions; a noisy block sees the clean blocks before it and
  itself, the clean copy is block-causal. Each noisy block's logits are those of a forward of
  clean earlier blocks + that noisy block, so a step scores every answer token once, where the
  one-block sampler scores one block of each row.
* ``d2f`` (Discrete Diffusion Forcing, Wang et al. 2025; its released training code,
  ``D2F-train/utils/util.py`` ``forward_process_length`` / ``generate_monotonic_pmasks`` and
  ``utils/loss.py``): every answer block of ``bd_size`` (counted from the answer start) is noised
  at once, each at its own rate, and the rates never decrease along the answer: the first
  block's is drawn in [0.2, 0.7), each later one adds a share of what is left up to 0.7, so a
  block is trained to denoise from earlier blocks that are themselves partly masked (less than
  it), the state the pipelined decode (dllm/engine/pipeline.py) feeds it. The prompt is never masked.
  Attention is block-causal with the whole prompt as one block (block origin "prompt", D2F's
  ``build_custom_float_attention_mask``); the loss is the cross-entropy of each masked token
  divided by its block's rate, averaged over the masked tokens (``d2f_loss``). Its target is the
  data's token (D2F's code with ``self_align`` off) or, given a teacher, the teacher's
  distribution at that position with every key visible (``self_align`` on, as its released
  configs train: the bidirectional base distilled into the block-causal student).
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from dllm.models.visibility import KeyVisibility, block_causal_spans


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


def block_diffusion_copies(ids: Tensor, valid: Tensor, answer: Tensor, answer_start: int, bd_size: int,
                           mask_id: int, gen: torch.Generator, shift: bool
                           ) -> tuple[Tensor, Tensor, KeyVisibility, Tensor, Tensor, Tensor]:
    """The two-copy block-diffusion batch for rows (B, W) whose answers start at ``answer_start``
    (P) and run to W in whole blocks: (tokens, positions, visibility, target, masked, read), each
    (B, W + 2A) with A = W - P but ``read`` (W + 2A,): the column whose logits predict each
    column's token (its own; with ``shift``, Dream's logit shift, the one before, which for the
    first token of a noisy block is the clean token before that block, as when it is decoded)."""
    B, W = ids.shape
    P, A = answer_start, W - answer_start
    if A % bd_size:
        raise ValueError(f"answer width {A} is not a multiple of bd_size {bd_size}")
    span = answer[:, P:]
    n_blocks = A // bd_size
    t = torch.rand(B, n_blocks, generator=gen).repeat_interleave(bd_size, dim=1)
    first = span & (torch.rand(B, A, generator=gen) < (1 - 1e-3) * t + 1e-3)
    copies = (first, span & ~first)
    tokens = torch.cat([ids] + [ids[:, P:].masked_fill(m, mask_id) for m in copies], dim=1)
    target = torch.cat([ids] + [ids[:, P:]] * len(copies), dim=1)
    masked = torch.cat([torch.zeros_like(valid)] + list(copies), dim=1)
    positions = (valid.long().cumsum(-1) - 1).clamp_min(0)
    positions = torch.cat([positions] + [positions[:, P:]] * len(copies), dim=1)
    keys = torch.cat([valid] + [valid[:, P:]] * len(copies), dim=1)
    T = W + len(copies) * A
    allowed = torch.zeros(T, T, dtype=torch.bool)
    for lo, hi, key_end in block_causal_spans(0, W, W, prompt_width=P, block_size=bd_size):
        allowed[lo:hi, :key_end] = True
    read = torch.arange(T)
    for c in range(len(copies)):
        for b in range(n_blocks):
            lo = W + c * A + b * bd_size
            allowed[lo:lo + bd_size, :P + b * bd_size] = True
            allowed[lo:lo + bd_size, lo:lo + bd_size] = True
            if shift:
                read[lo:lo + bd_size] = torch.arange(lo - 1, lo + bd_size - 1)
                read[lo] = P + b * bd_size - 1
    return tokens, positions, KeyVisibility(valid=keys, allowed=allowed), target, masked, read


# D2F's per-block mask rates (generate_monotonic_pmasks): the first block's in
# [D2F_FIRST_LOW, D2F_FIRST_LOW + D2F_FIRST_SPAN), later ones climbing to at most D2F_LAST.
D2F_FIRST_LOW, D2F_FIRST_SPAN, D2F_LAST = 0.2, 0.5, 0.7


def d2f_block_rates(n_blocks: Tensor, gen: torch.Generator) -> Tensor:
    """(B, N) mask rate of each row's answer blocks, N = the most blocks of a row: non-decreasing
    along a row; block k > 0 adds u_k (0.7 - p_0) / (n - 1) with u_k ~ U(0, 1) and n the row's own
    block count (D2F scales by the batch's, and trains one row a batch), so a row's last block
    stays at or below 0.7. Entries past a row's own blocks are unused."""
    B, N = n_blocks.shape[0], int(n_blocks.max())
    first = D2F_FIRST_LOW + D2F_FIRST_SPAN * torch.rand(B, 1, generator=gen)
    room = (D2F_LAST - first) / (n_blocks[:, None] - 1).clamp_min(1)
    steps = torch.rand(B, N - 1, generator=gen) * room
    return torch.cat([first, first + steps.cumsum(-1)], dim=1)


def d2f_masks(answer: Tensor, answer_start: int, bd_size: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """(masked, rate), both (B, L), for rows whose answers start at column ``answer_start``:
    every answer token masked i.i.d. at its block's rate (``d2f_block_rates``; a last partial
    block counts as a block); ``rate`` is 0 off the answer, the loss weight's denominator on it."""
    B, L = answer.shape
    lengths = answer.sum(-1)
    rates = d2f_block_rates((lengths + bd_size - 1).div(bd_size, rounding_mode="floor").clamp_min(1), gen)
    block = ((torch.arange(L) - answer_start).clamp_min(0) // bd_size).clamp_max(rates.shape[1] - 1)
    rate = rates[:, block] * answer
    return answer & (torch.rand(B, L, generator=gen) < rate), rate


def d2f_loss(logits: Tensor, target: Tensor, masked: Tensor, rate: Tensor, teacher: Tensor | None = None) -> Tensor:
    """Mean over masked positions of cross-entropy / rate: against ``target`` (B, L) token ids, or
    against softmax(``teacher``) (B, L, V), the teacher's logits at the same positions."""
    goal = target[masked] if teacher is None else teacher[masked].float().softmax(-1)
    return (F.cross_entropy(logits[masked], goal, reduction="none") / rate[masked]).mean()
