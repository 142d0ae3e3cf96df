"""Monte-Carlo log-likelihood of a continuation under a masked-diffusion model (LLaDA, Dream).

A masked-diffusion model has no exact likelihood; LLaDA (Nie et al. 2025, Eq. 6 and its
``get_log_likelihood.py``) scores a continuation y of length L after a context c with the
lower bound

    B(y | c) = E_{k ~ U{1..L}} E_{M: |M| = k} [ (L / k) * sum_{i in M} log p(y_i | c, y with M masked) ]

estimated from ``mc_num`` draws of (k, M). The draws are stratified as in LLaDA: the k of
draw j is ``k0 + floor(j * L / n)`` wrapped into {1..L} for one uniform k0, so the counts cover
the range evenly while each draw's k stays uniform and the estimate unbiased (LLaDA rounds
instead of flooring, which ties to even at half steps and favours even counts); M is a uniform
k-subset. Every request has its own random stream, seeded from the seed and its token ids,
so an estimate does not depend on the batch it was computed in or on the order of requests.
Rows of many requests (ragged lengths, left-padded) share forwards of ``batch_size`` rows.
Dream reads the logit of position i from output i - 1 (``model.shift_logits``).
"""
from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from dllm import kernels
from dllm.runner.canvas import build_canvas
from dllm.runner.model_runner import ModelRunner


@dataclass(kw_only=True, slots=True)
class LikelihoodEstimate:
    """One request's estimate: the bound's Monte-Carlo mean, its standard error, the per-draw
    values, the forwards it took part in, the query tokens of its rows in them and its share of
    their wall time."""

    mean: float
    stderr: float
    draws: list[float]
    nfe: int
    token_forwards: int
    seconds: float


def request_generator(seed: int, context: Sequence[int], continuation: Sequence[int]) -> torch.Generator:
    """A CPU random stream for one request, keyed by the seed and the request's token ids."""
    key = hashlib.sha256(f"{seed}|{list(context)}|{list(continuation)}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(key[:8], "little") & (2**63 - 1))


def mask_draws(length: int, n: int, generator: torch.Generator) -> Tensor:
    """(n, length) bool: ``n`` stratified draws of a mask count k in {1..length} and a uniform
    k-subset of the continuation for each."""
    k0 = int(torch.randint(1, length + 1, (), generator=generator))
    counts = (k0 - 1 + torch.arange(n) * length // n) % length + 1
    order = torch.argsort(torch.rand(n, length, generator=generator), dim=1)  # a uniform permutation per draw
    return order < counts[:, None]


def check_likelihood_model(model) -> None:
    """The bound is defined here for bidirectional masked-diffusion models (LLaDA, Dream)."""
    if model.attention != "bidirectional":
        raise ValueError(f"loglikelihood needs a bidirectional masked-diffusion model (LLaDA or Dream); this "
                         f"checkpoint uses {model.attention!r} attention, so evaluate it on generate_until "
                         "tasks only")


@torch.inference_mode()
def mc_loglikelihood(model, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *, mc_num: int,
                     batch_size: int, seed: int = 0) -> list[LikelihoodEstimate]:
    """Estimate B(continuation | context) for each (context ids, continuation ids) pair."""
    check_likelihood_model(model)
    for i, (context, continuation) in enumerate(pairs):
        if not context or not continuation:
            raise ValueError(f"request {i}: context and continuation each need at least one token")
        if len(context) + len(continuation) > model.config.max_sequence_length:
            raise ValueError(f"request {i}: {len(context)} context + {len(continuation)} continuation tokens "
                             f"exceed the model's context of {model.config.max_sequence_length}")
    masks = [mask_draws(len(c), mc_num, request_generator(seed, ctx, c)) for ctx, c in pairs]
    rows = [(r, j) for r in range(len(pairs)) for j in range(mc_num)]
    draws = torch.zeros(len(pairs), mc_num, dtype=torch.float64)
    nfe, token_forwards, seconds = [0] * len(pairs), [0] * len(pairs), [0.0] * len(pairs)
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        began = time.perf_counter()
        values = _forward_draws(model, [pairs[r] for r, _ in chunk], [masks[r][j] for r, j in chunk])
        elapsed = time.perf_counter() - began
        width = max(sum(map(len, pairs[r])) for r, _ in chunk)
        for (r, j), value in zip(chunk, values.tolist()):
            draws[r, j] = value
            seconds[r] += elapsed / len(chunk)
            token_forwards[r] += width
        for r in {r for r, _ in chunk}:
            nfe[r] += 1
    out = []
    for r in range(len(pairs)):
        d = draws[r]
        stderr = float(d.std(unbiased=True) / math.sqrt(mc_num)) if mc_num > 1 else float("nan")
        out.append(LikelihoodEstimate(mean=float(d.mean()), stderr=stderr, draws=d.tolist(), nfe=nfe[r],
                                      token_forwards=token_forwards[r], seconds=seconds[r]))
    return out


def _forward_draws(model, pairs: list, masks: list[Tensor]) -> Tensor:
    """(N,) values (L / k) * sum of masked log-probs, one per (pair, mask) row, in one forward."""
    seqs = [list(ctx) + list(cont) for ctx, cont in pairs]
    canvas = build_canvas(seqs, gen_length=0, mask_id=model.mask_token_id, pad_id=model.config.pad_token_id,
                          device=model.device)
    width, longest = canvas.prompt_width, max(len(cont) for _, cont in pairs)
    targets = torch.zeros(len(pairs), longest, dtype=torch.long)
    masked = torch.zeros(len(pairs), longest, dtype=torch.bool)
    for row, ((_, cont), mask) in enumerate(zip(pairs, masks)):  # continuations end at the canvas end
        targets[row, longest - len(cont) :] = torch.tensor(list(cont), dtype=torch.long)
        masked[row, longest - len(cont) :] = mask
    targets, masked = targets.to(model.device), masked.to(model.device)
    canvas.tokens[:, width - longest :] = torch.where(masked, model.mask_token_id, canvas.tokens[:, width - longest :])
    logits = ModelRunner(model, canvas).forward(canvas.tokens, 0)
    shift = 1 if model.shift_logits else 0
    window = logits[:, width - longest - shift : width - shift].float()
    logp = kernels.log_softmax(window).gather(-1, targets[..., None])[..., 0]
    total = (logp * masked).sum(dim=1).double()
    lengths = torch.tensor([len(cont) for _, cont in pairs], dtype=torch.float64, device=total.device)
    return (total * lengths / masked.sum(dim=1).double()).cpu()
