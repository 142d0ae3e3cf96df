"""Uniform-state training objective (DiffusionGemma, ``--objective uniform_state``).

The model has no mask token: at inference a canvas starts as uniform-random tokens and every
step keeps the accepted positions and re-noises the others with fresh uniform-random tokens
(transformers' ``EntropyBoundSampler``), so a canvas the denoiser sees is the answer with some
positions replaced by uniform draws. Training makes that state:

* each row draws one of its answer canvases (``canvas_length`` tokens, counted from the answer
  start); the prompt and the canvases before it are clean and run through the encoder (causal,
  with gradients: the encoder and the denoiser share every weight), later canvases are hidden;
* the drawn canvas is corrupted at a rate t ~ U(0, 1) per row: each position independently
  replaced, with probability t, by a token drawn uniformly from the whole vocabulary (the
  reference's draw, so a replacement may equal the clean token), the uniform forward process of
  D3PM / UDLM (Austin et al. 2021; Schiff et al. 2024);
* the loss is the cross-entropy of the clean token at **every** canvas position, corrupted or
  not: at inference every position is re-predicted and may be re-sampled, so the model must
  also say which visible tokens are right (UDLM scores every position). Plain mean, no ELBO
  weight (the project's masked objective trained faster without its 1/t weight at this size).

Self-conditioning (Chen et al. 2022, "Analog Bits", their pseudo-code): in half of the steps a
first pass without gradients and without self-conditioning predicts the same corrupted canvas,
and its logits are fed to the second pass, which carries the loss; in the other half the signal
is zero, as on a canvas's first denoising step. transformers' ``generate`` feeds back the
previous step's *tempered* logits (divided by the scheduled temperature, between ``t_min`` 0.4
and ``t_max`` 0.8 by default), so the first pass's logits are divided by a temperature drawn
per row from that range: the signal has the sharpness the model reads at inference.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

# transformers' DiffusionGemma generation defaults (t_min, t_max): the tempered self-conditioning range
SC_TEMPERATURES = (0.4, 0.8)


@dataclass(kw_only=True, slots=True)
class UniformStateBatch:
    """One training batch: the clean prefix (prompt + earlier canvases, left-padded; keys past a
    row's drawn canvas start invalid) and the drawn canvas of each row."""

    prefix: Tensor  # (B, S) token ids
    prefix_positions: Tensor  # (B, S)
    prefix_valid: Tensor  # (B, S) bool: False for left padding and for canvases after the drawn one
    canvas: Tensor  # (B, C) clean token ids of the drawn canvas
    canvas_positions: Tensor  # (B, C)


def draw_canvases(ids: Tensor, valid: Tensor, answer_len: Tensor, answer_start: int, canvas: int,
                  gen: torch.Generator) -> UniformStateBatch:
    """Rows (B, W) whose answers (``answer_len`` tokens each, a multiple of ``canvas``) start at
    column ``answer_start`` (prompts left-padded to it): one canvas drawn per row."""
    if bool((answer_len % canvas).any()) or bool((answer_len <= 0).any()):
        raise ValueError(f"answer lengths {answer_len.tolist()} must be positive multiples of the canvas {canvas}")
    B = ids.shape[0]
    drawn = (torch.rand(B, generator=gen) * (answer_len // canvas)).long()  # (B,)
    start = answer_start + drawn * canvas  # (B,) column of each drawn canvas
    positions = (valid.long().cumsum(-1) - 1).clamp_min(0)  # (B, W)
    cols = start[:, None] + torch.arange(canvas)  # (B, C)
    width = int(start.max())  # the prefix runs up to the latest drawn canvas
    prefix_valid = valid[:, :width] & (torch.arange(width)[None, :] < start[:, None])
    return UniformStateBatch(prefix=ids[:, :width], prefix_positions=positions[:, :width], prefix_valid=prefix_valid,
                             canvas=ids.gather(1, cols), canvas_positions=positions.gather(1, cols))


def uniform_corruption(canvas: Tensor, vocab_size: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """(noisy, replaced), both (B, C): each position replaced with probability t ~ U(0, 1) (one t
    per row) by a uniform draw from [0, vocab_size)."""
    B, C = canvas.shape
    t = torch.rand(B, 1, generator=gen)
    replaced = torch.rand(B, C, generator=gen) < t
    noise = torch.randint(0, vocab_size, (B, C), generator=gen)
    return torch.where(replaced, noise, canvas), replaced


def self_conditioning_temperature(batch: int, gen: torch.Generator,
                                  temperatures: tuple[float, float] = SC_TEMPERATURES) -> Tensor:
    """(B, 1, 1) temperatures drawn uniformly from the generation schedule's range."""
    low, high = temperatures
    return (low + (high - low) * torch.rand(batch, generator=gen))[:, None, None]


def uniform_state_loss(model, batch: UniformStateBatch, gen: torch.Generator, self_conditioning_rate: float = 0.5
                       ) -> tuple[Tensor, Tensor]:
    """(loss, replaced): the mean cross-entropy of the clean canvas at every position, after the
    encoder ran the clean prefix and, in a ``self_conditioning_rate`` share of calls, a first
    no-grad pass fed its tempered logits back as self-conditioning."""
    noisy, replaced = uniform_corruption(batch.canvas, model.config.vocab_size, gen)
    use_sc = bool(torch.rand((), generator=gen) < self_conditioning_rate)
    temperature = self_conditioning_temperature(noisy.shape[0], gen)  # drawn every call: a stable stream
    store = model.new_prefix()
    model.encode(batch.prefix, batch.prefix_positions, batch.prefix_valid, store)
    sc = None
    if use_sc:
        with torch.no_grad():
            sc = model.denoise(noisy, batch.canvas_positions, store) / temperature
    logits = model.denoise(noisy, batch.canvas_positions, store, self_conditioning=sc)  # (B, C, V)
    return F.cross_entropy(logits.flatten(0, 1), batch.canvas.flatten()), replaced
