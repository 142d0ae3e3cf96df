"""Uniform-state diffusion (DiffusionGemma): the pieces of one denoising step, tensors in and out.

There is no mask token: a canvas starts as random tokens, each step samples a token for every
position from the tempered logits, accepts the lowest-entropy ones under an entropy bound (the
``eb_sampler`` rule over every canvas position) and re-noises the others with fresh random tokens. The temperature falls linearly over the steps;
a canvas stops early once its argmax is stable and its mean entropy low. The strategy
``uniform`` (``strategies/uniform.py``) runs these inside the engine's loop.

Random draws come from one of two sources: ``CounterDraws`` (the default) keys every draw by the
row's seed, its step count and the answer position (``samplers/noise.py``), so a row decodes
alike alone and in any batch; ``GeneratorDraws`` (``draws="generator"``, the parity mode) takes
them from a ``torch.Generator`` in transformers' order (the canvas, then per step the sampled
tokens, then the re-noise tokens, for the whole batch), which reproduces its ``generate``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from dllm.kernels.confidence_stats import hash_uniform_torch
from dllm.samplers.noise import RULE_COLUMN, RowNoise

CANVAS_DRAW, RENOISE_DRAW = 1, 2  # rule columns of the two token draws (independent of the rules' 0)


def scheduled_temperature(remaining: int, num_steps: int, t_min: float, t_max: float) -> float:
    """t_min + (t_max - t_min) * remaining / num_steps; ``remaining`` counts down num_steps..1
    (transformers' ``LinearTemperatureScheduleLogitsProcessor``)."""
    return t_min + (t_max - t_min) * remaining / num_steps


def token_entropy(logits: Tensor) -> Tensor:
    """(..., V) logits -> (...) entropy in nats, float32."""
    logp = logits.float().log_softmax(-1)
    return -(logp.exp() * logp).nan_to_num().sum(-1)


@dataclass(kw_only=True, slots=True)
class StableConfident:
    """Stop a row's canvas when its argmax equals each of its last ``stability`` argmax canvases
    and its mean entropy is below ``confidence`` (``StableAndConfidentStoppingCriteria``)."""

    stability: int
    confidence: float
    history: Tensor | None = field(default=None, init=False)  # (stability, B, W)

    def reset(self) -> None:
        self.history = None

    def __call__(self, argmax: Tensor, entropy: Tensor) -> Tensor:
        """argmax (B, W), entropy (B, W) of the tempered logits -> (B,) bool."""
        stable = torch.ones(argmax.shape[0], dtype=torch.bool, device=argmax.device)
        if self.stability > 0:
            if self.history is None:
                self.history = torch.full((self.stability, *argmax.shape), -1, dtype=argmax.dtype,
                                          device=argmax.device)
            stable = (self.history == argmax[None]).all(-1).all(0)
            self.history = torch.cat([self.history[1:], argmax[None]])
        return stable & (entropy.mean(-1) < self.confidence)


class CounterDraws:
    """Draws keyed by (row seed, step count, answer position[, vocabulary id]): batch-invariant."""

    def canvas(self, noise: RowNoise, vocab: int) -> Tensor:
        return _uniform_ids(noise, vocab, CANVAS_DRAW)

    def renoise(self, noise: RowNoise, vocab: int) -> Tensor:
        return _uniform_ids(noise, vocab, RENOISE_DRAW)

    def sample(self, noise: RowNoise, logits: Tensor) -> Tensor:
        """Gumbel-max over (B, W, V) tempered logits: a draw from their softmax."""
        B, W, V = logits.shape
        columns = torch.arange(V, device=logits.device)
        u = hash_uniform_torch(noise.seed[:, None, None], noise.counters()[..., None], columns)
        return (logits.float() - (-u.log()).log()).argmax(-1)


class GeneratorDraws:
    """transformers' draws from one ``torch.Generator`` (the parity mode): whole-batch draws in its
    order, so a row's tokens depend on the batch it runs in."""

    def __init__(self, seed: int, device: torch.device) -> None:
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def canvas(self, noise: RowNoise, vocab: int) -> Tensor:
        shape = (noise.seed.shape[0], noise.positions.shape[-1])
        return torch.randint(0, vocab, shape, generator=self.generator, device=noise.seed.device)

    renoise = canvas

    def sample(self, noise: RowNoise, logits: Tensor) -> Tensor:
        B, W, V = logits.shape
        probs = logits.softmax(-1, dtype=torch.float32).view(-1, V)
        return torch.multinomial(probs, 1, generator=self.generator).view(B, W)


def _uniform_ids(noise: RowNoise, vocab: int, draw: int) -> Tensor:
    column = torch.tensor(RULE_COLUMN - draw, device=noise.seed.device)
    u = hash_uniform_torch(noise.seed[:, None], noise.counters(), column)
    return (u * vocab).long().clamp_max(vocab - 1)
