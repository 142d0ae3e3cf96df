"""strategy="uniform": uniform-state decoding (DiffusionGemma) inside the engine's loop.

The engine's canvas keeps its "undecided" placeholder (the model's ``mask_token_id``, an id
past its vocabulary) in the active window until a row's canvas is final; the strategy holds the
window's working canvas of random tokens, and each round is one denoising step of every row
still moving: the denoiser's logits over the working canvas (``cache="encoder"``: the prefix
K/V, the previous step's logits as self-conditioning) -> the scheduled temperature -> a sampled
token per position -> the rule's acceptance (``eb_sampler``: the entropy bound, every canvas
position eligible) -> re-noise the rest -> the stable-and-confident stop. A row whose canvas stops (or runs out of steps: ``steps_per_block`` of them) commits
its argmax canvas through ``state.commit``, so end-of-text, ``finish_rows``, streaming and the
result read it as any committed block. Steps count down from ``steps_per_block`` per row.
A constrained row samples, accepts and stops on the tokens that keep its canvas completable, and
its final canvas is committed as a word (``_commit_canvas``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from dllm.kernels import confidence_stats
from dllm.samplers.base import RuleInput, register_strategy
from dllm.samplers.uniform_state import (
    CounterDraws, GeneratorDraws, StableConfident, scheduled_temperature, token_entropy,
)

DRAWS = ("counter", "generator")


@register_strategy("uniform")
@dataclass(kw_only=True, slots=True)
class UniformState:
    """Options are transformers' DiffusionGemma generation options under the same names (its
    ``entropy_bound`` is the rule's ``gamma``); ``draws="generator"`` is the parity mode
    (``samplers/uniform_state.py``)."""

    candidate_rows = 1  # rows one canvas row occupies in a forward (dllm.engine.memory)
    t_min: float = 0.4
    t_max: float = 0.8
    stability_threshold: int = 1
    confidence_threshold: float = 0.005
    draws: str = "counter"
    _window: int = field(default=-1, init=False)
    _canvas: Tensor | None = field(default=None, init=False)  # (B, W) working canvas
    _argmax: Tensor | None = field(default=None, init=False)  # (B, W) the last step's argmax
    _prob: Tensor | None = field(default=None, init=False)  # (B, W) its probability
    _allowed: Tensor | None = field(default=None, init=False)  # (B, W, V) the last step's logits a constraint allows
    _finished: Tensor | None = field(default=None, init=False)  # (B,) rows whose canvas stopped
    _stopper: StableConfident | None = field(default=None, init=False)
    _source: CounterDraws | GeneratorDraws | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.draws not in DRAWS:
            raise ValueError(f"strategy 'uniform': draws={self.draws!r}; expected one of {DRAWS}")
        if not 0 <= self.t_min < self.t_max:
            raise ValueError(f"strategy 'uniform': needs 0 <= t_min < t_max, got t_min={self.t_min}, t_max={self.t_max}")
        if self.confidence_threshold <= 0 or self.stability_threshold < 0:
            raise ValueError("strategy 'uniform': confidence_threshold must be > 0 and stability_threshold >= 0")
        self._stopper = StableConfident(stability=self.stability_threshold, confidence=self.confidence_threshold)

    def step(self, state) -> Tensor:
        if self._window != state.bs:  # a new canvas
            self._begin(state)
        num_steps = state.config.steps_per_block
        moving = state.moving_rows()
        remaining = num_steps - int(state.step)
        vocab = state.model.config.vocab_size
        tokens = state.tokens.clone()
        tokens[:, state.bs:state.be] = self._canvas
        logits = state.block_logits(tokens)  # (B, W, V) float32, self-conditioned by the cache
        tempered = logits / scheduled_temperature(remaining, num_steps, self.t_min, self.t_max)
        # a constrained row samples, accepts and stops on the ids that keep its canvas completable,
        # each position a hole of the engine's canvas (its denoiser still reads its own logits)
        allowed = tempered if state.constraints is None else state.constraints.mask_logits(state, tempered)
        noise = state.noise()
        sampled = self._source.sample(noise, allowed)
        B, W, V = tempered.shape
        stats = confidence_stats(allowed.reshape(B * W, V)).reshape(B, W)  # argmax, entropy of the allowed tempered
        argmax = stats.token
        # acceptance is the rule (eb_sampler: the k lowest entropies with sum - max <= gamma) over
        # every canvas position: no position is "masked" in uniform-state diffusion; a constrained
        # row's accepted positions are its step's decided tokens, together completable
        everywhere = torch.ones(B, W, dtype=torch.bool, device=tempered.device)
        accept = state.rule(RuleInput(stats=stats, eligible=everywhere, step=state.row_step,
                                      num_steps=num_steps, block_masks=state.block_masks))
        if state.constraints is not None:
            accept = state.keep_completable(accept, sampled, scores=stats.prob)
        renoised = torch.where(accept, sampled, self._source.renoise(noise, vocab))  # after the sample draw
        still = ~self._finished  # rows whose canvas stopped keep it (and their logits)
        self._canvas = torch.where(still[:, None], renoised, self._canvas)
        self._argmax = torch.where(still[:, None], argmax, self._argmax)
        if state.constraints is not None:  # what the canvas's commit reads
            first = self._prob is None  # the canvas's first step: every row takes it
            self._prob = stats.prob if first else torch.where(still[:, None], stats.prob, self._prob)
            self._allowed = allowed if first else torch.where(still[:, None, None], allowed, self._allowed)
        sc = state.cache.self_conditioning
        state.cache.self_conditioning = tempered if sc is None else torch.where(still[:, None, None], tempered, sc)
        self._finished |= self._stopper(self._argmax, token_entropy(state.cache.self_conditioning))
        final = (self._finished | (remaining <= 1)) & moving
        self._commit_canvas(state, final)
        return moving.long()

    def _commit_canvas(self, state, final: Tensor) -> None:
        """Commit the argmax canvas of the ``final`` (B,) rows. A constrained row's is made a word:
        its argmax tokens that keep the canvas completable are committed, most probable first,
        and the positions left take the argmax of the same logits masked for the canvas they
        left, until none is left (each pass commits at least one: its best is allowed alone)."""
        mask = final[:, None].expand_as(self._argmax)
        if state.constraints is None:
            state.commit(mask, self._argmax)
            return
        token, prob = self._argmax, self._prob
        while True:
            state.commit(state.keep_completable(mask, token, scores=prob), token)
            mask = mask & state.eligible()
            if not bool(mask.any()):
                return
            masked = state.constraints.mask_logits(state, self._allowed)  # (B, W, V) for the canvas now
            B, W, V = masked.shape
            stats = confidence_stats(masked.reshape(B * W, V)).reshape(B, W)
            token, prob = stats.token, stats.prob

    def _begin(self, state) -> None:
        if self._source is None:
            self._source = (CounterDraws() if self.draws == "counter"
                            else GeneratorDraws(state.config.seed, state.tokens.device))
        self._window = state.bs
        self._canvas = self._source.canvas(state.noise(), state.model.config.vocab_size)
        self._argmax = self._canvas.clone()
        self._prob = self._allowed = None
        self._finished = torch.zeros(state.tokens.shape[0], dtype=torch.bool, device=state.tokens.device)
        self._stopper.reset()
        state.cache.self_conditioning = None

