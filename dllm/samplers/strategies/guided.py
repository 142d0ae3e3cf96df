"""Guided diffusion (FlashDLM, Hu et al. 2025, arXiv 2505.21467): the autoregressive helper
decides, the diffusion model drafts.

Each round the diffusion model drafts every masked position of the active block from one
forward (its argmax), and the helper reads the prompt, the committed answer and the draft in one
causal forward. Left to right from the first mask, each draft token the helper would itself
choose (its argmax there) is committed, and at the first one it would not, the helper's own
token is committed instead and the round ends: speculative decoding with the diffusion model as
the drafter and the helper as the greedy verifier (the paper's deterministic verification). So
the answer is the helper's greedy decode whatever the diffusion model drafts; the diffusion
model only sets how many tokens a forward commits (at least one). That makes guided compose
with every cache (FlashDLM pairs it with FreeCache's approximate K/V; dllm's prefix / dual /
adaptive caches change the drafts, never the answer), with blocks and with ragged batches.

Refused, with the reason: temperature > 0 (the paper's sampling verifiers are not here), a
stopper, classifier-free guidance and a rule other than the default (guided applies none). The
mask id is never the helper's choice. Under a constraint the helper chooses among the tokens that
keep the canvas completable given the draft before them (verifier_choice.py): the answer is its
constrained greedy decode.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from dllm.samplers.base import register_strategy
from dllm.samplers.strategies.apd import helper_logits, refuse_beside_helper, require_helper
from dllm.samplers.strategies.verifier_choice import verifier_choice


@register_strategy("guided")
@dataclass(kw_only=True, slots=True)
class Guided:
    candidate_rows = 1  # rows one canvas row occupies in a forward (dllm.engine.memory)

    def check_config(self, config) -> None:
        """Refuse what guided diffusion does not compose with, naming why."""
        if config.temperature > 0:
            raise ValueError("guided commits the helper's greedy tokens (the paper's deterministic verification); "
                             "its sampling verifiers are not implemented: use temperature=0")
        refuse_beside_helper("guided", config, "what its helper verifies", "the block")

    def check_model(self, model) -> None:
        """Refuse a model without its helper, before any forward (``dllm.engine.model_fit``)."""
        require_helper(model, "guided")

    def step(self, state) -> Tensor:
        """One round; returns the tokens each row committed."""
        self.check_config(state.config)
        helper = require_helper(state.model, "guided")
        bs, be = state.bs, state.be
        eligible = state.eligible() & state.runner.active[:, None]  # (B, W) the row's masks left (a suffix)
        W = eligible.shape[1]
        j = torch.arange(W, device=eligible.device)
        logits = state.block_logits()  # (B, W, V)
        draft = state.statistics(logits).token  # (B, W) the diffusion model's argmax
        tokens = state.tokens.clone()
        tokens[:, bs:be] = torch.where(eligible, draft, tokens[:, bs:be])
        verify = helper_logits(helper, tokens, state.canvas.valid, state.canvas.positions, bs, be)  # (B, W, V_h)
        if state.mask_id < verify.shape[-1]:
            verify[..., state.mask_id] = float("-inf")
        start = torch.where(eligible.any(-1), eligible.int().argmax(-1), W)  # (B,) the first mask
        # (B, W) the helper's token after the prompt, answer and draft before it (a constrained
        # row's: among those that keep its canvas completable)
        choice = verifier_choice(state, verify, draft, eligible, start)
        # commit up to the first draft the helper would not choose, which takes the helper's token
        reject = eligible & (choice != draft)
        first = torch.where(reject.any(-1), reject.int().argmax(-1), W)  # (B,)
        commit = eligible & (j[None, :] <= first[:, None])
        state.commit(commit, choice)
        return commit.sum(-1)
