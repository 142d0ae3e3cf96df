"""Log-probabilities of committed tokens, recorded at commit time.

A diffusion row commits each answer position at some forward; the log-probability reported for
that token is the one under the forward that committed it: the log-softmax of that forward's
logits at the position (un-tempered, before top-k / top-p filtering, as ``TokenStats.prob``),
with the ``top`` most likely tokens of the same distribution. ``DecodeState`` keeps the last
logits of the canvas rows and calls ``committed`` from ``commit``; commits it cannot attribute to
one canvas forward (candidate forwards of FreeDave / LoPA, a stopper's fill outside the window)
stay NaN, so callers that report logprobs admit only the plain strategy and in-window stoppers.
Under tensor parallelism the logits are the rank's vocabulary shard: the log-normaliser and the
top alternatives come from small exchanges (``TensorShard.logprobs``), the values are one
process's (up to the rounding of the normaliser's sum).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from dllm import kernels

# Reported logprobs are read from the forward that commits each token: one forward per commit
# (the plain strategy) and commits inside the decision window (no SchED / Prophet fill).
LOGPROB_STRATEGIES, LOGPROB_STOPPERS = ("plain",), ("none", "eotp")
MAX_TOP_LOGPROBS = 20  # alternatives per token (OpenAI's bound for chat, vLLM's default max_logprobs)


def check_logprobs(top: int, config) -> None:
    """Refuse a ``top`` outside [0, MAX_TOP_LOGPROBS], or a ``config`` (GenerationConfig) whose
    commits are not each one forward's (ValueError naming the fix)."""
    if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS:
        raise ValueError(f"logprobs must be an integer in [0, {MAX_TOP_LOGPROBS}] (alternatives per token), got {top!r}")
    if config.strategy not in LOGPROB_STRATEGIES or config.stopper not in LOGPROB_STOPPERS:
        strategies, stoppers = (" or ".join(map(repr, names)) for names in (LOGPROB_STRATEGIES, LOGPROB_STOPPERS))
        raise ValueError(f"logprobs are recorded from the forward that commits each token: they need strategy "
                         f"{strategies} and stopper {stoppers} (got strategy {config.strategy!r}, stopper "
                         f"{config.stopper!r}); drop logprobs or use those")


class TokenLogprob(NamedTuple):
    """One answer token's log-probability and its ``top`` alternatives (token id, logprob),
    most likely first."""

    logprob: float
    top: list[tuple[int, float]]


class CommitLogprobs:
    """(B, G) log-probabilities of the committed answer tokens and (B, G, top) alternatives."""

    def __init__(self, batch: int, gen_length: int, top: int, device: torch.device) -> None:
        self.top = top
        self.logprob = torch.full((batch, gen_length), math.nan, device=device)
        self.top_ids = torch.zeros((batch, gen_length, top), dtype=torch.long, device=device)
        self.top_logprob = torch.full((batch, gen_length, top), math.nan, device=device)
        self._logits: Tensor | None = None
        self._tp = None  # the TensorShard whose vocabulary shard _logits holds (None: whole rows)

    def saw(self, logits: Tensor, rows: Tensor | None, batch: int, tp=None) -> None:
        """The logits (N, W, V) a forward gave; kept when they are the canvas rows' own. ``tp``:
        this rank's TensorShard when they are its vocabulary shard."""
        self._logits = logits if rows is None and logits.shape[0] == batch else None
        self._tp = tp

    def committed(self, mask: Tensor, token: Tensor, offset: int, lead: Tensor | None = None) -> None:
        """Record ``token`` (B, W) where ``mask`` (B, W) committed, the window starting at answer
        region position ``offset``; ``lead`` (B,): prompt-tail positions leading each row's answer
        region (dllm/engine/block_alignment.py), so that positions are each row's own answer positions."""
        width = mask.shape[1]
        if self._logits is None or self._logits.shape[1] != width:
            return
        chosen, values, ids = self._distribution(token)
        start = torch.full((mask.shape[0],), offset, device=mask.device) - (0 if lead is None else lead)
        cols = torch.arange(self.logprob.shape[1], device=mask.device)[None, :] - start[:, None]  # (B, G)
        col = cols.clamp(0, width - 1)
        take = (cols >= 0) & (cols < width) & mask.gather(1, col)  # answer positions this commit wrote
        self.logprob.copy_(torch.where(take, chosen.gather(1, col), self.logprob))
        if self.top:
            k = values.shape[-1]
            at, keep = col[..., None].expand(-1, -1, k), take[..., None]
            self.top_logprob[..., :k] = torch.where(keep, values.gather(1, at), self.top_logprob[..., :k])
            self.top_ids[..., :k] = torch.where(keep, ids.gather(1, at), self.top_ids[..., :k])

    def _distribution(self, token: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Logprobs (B, W) of ``token`` (B, W) and the ``top`` alternatives (B, W, top): logprobs
        and ids, under the kept logits' softmax over the whole vocabulary."""
        if self._tp is not None:
            B, W, V = self._logits.shape
            chosen, values, ids = self._tp.logprobs(self._logits.reshape(B * W, V), token.reshape(-1), self.top)
            return chosen.reshape(B, W), values.reshape(B, W, -1), ids.reshape(B, W, -1)
        logp = kernels.log_softmax(self._logits)  # one fixed order a row (batch-invariant on CUDA)
        chosen = logp.gather(-1, token[..., None]).squeeze(-1)
        if not self.top:
            return chosen, logp[..., :0], token[..., None][..., :0]
        values, ids = logp.topk(min(self.top, logp.shape[-1]), dim=-1)
        return chosen, values, ids

    def read(self, row: int, start: int, stop: int, top: int) -> list[TokenLogprob]:
        """Answer positions [start, stop) of ``row``, with their ``top`` (<= self.top) alternatives."""
        logprob = self.logprob[row, start:stop].tolist()
        ids = self.top_ids[row, start:stop, :top].tolist()
        values = self.top_logprob[row, start:stop, :top].tolist()
        return [TokenLogprob(lp, list(zip(i, v))) for lp, i, v in zip(logprob, ids, values)]
