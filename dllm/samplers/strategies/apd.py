"""APD (Israel et al. 2025, "Accelerating Diffusion LLMs via Adaptive Parallel Decoding").

Left to right, each round drafts every masked position of a lookahead window from one forward
of the diffusion model and commits the longest prefix of the draft that a mixture of the
diffusion model's marginals and a small autoregressive helper's next-token distributions would
itself choose: position 0 of the window always, position i > 0 while the draft token is the
argmax of ``R * diffusion logits + (1 - R) * helper logits`` there (the helper reading the
prompt, the committed answer and the draft before i). The number of tokens per forward adapts:
where the helper agrees with the parallel draft, many; where it does not, one.

As the released loop (``danielmisrael/apd``, ``dream/generation_utils.py``: ``apd_sample``,
``apd_accept_criterion``): the window is the first ``max_lookahead`` masks (M; all of the block
without it) and the diffusion model sees the canvas up to the window's end only; the draft is
the forward's token at each window position (sampled at temperature > 0) while the mixture's
target is its argmax; the mixture is of raw logits over the helper's vocabulary (the diffusion
model's mask id excluded, as everywhere in dllm). Blocks generalise the loop: the window never
crosses the active block (one block of ``gen_length`` is the released loop). Each row keeps its
own window and accepted count, so a ragged batch gives each row's single-run tokens.

``kv_window`` (W; None, the default, recomputes every K/V each round, exact) is the released
loop's K/V window: each round recomputes the diffusion model's K/V from W - 1 positions before
the previous window start and keeps the older ones as last computed (apd_kv_window.py; a
ragged batch runs one forward per distinct recompute start, each row its single run).
``helper_cache=True`` keeps the helper's transformers cache of the prefix every row has
committed, as the released loop does (apd_helper_cache.py: the same tokens and forwards, the
helper fed fewer tokens); off (the default), each round runs the helper over the row's canvas
up to the window's end. Refused, with the reason: dllm's caches (they refresh K/V at block
boundaries, APD's window moves every round; ``kv_window`` is APD's own), a stopper,
classifier-free guidance, a rule other than the default (APD applies none) and ``kv_window`` on
a block-causal model.
Under a constraint (structured output) the draft is the masked statistics' and the mixture chooses
among the tokens that keep the canvas completable given the draft before them (verifier_choice.py).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor

from dllm.samplers.base import register_strategy
from dllm.samplers.strategies.apd_helper_cache import HelperPrefixCache
from dllm.samplers.strategies.apd_kv_window import APDWindowCache
from dllm.samplers.strategies.verifier_choice import verifier_choice


@contextmanager
def keys_before(canvas, end: Tensor):
    """Within the block: each row's keys at canvas positions >= ``end`` (B,) invisible, as if
    its canvas stopped there (APD forwards the canvas up to the lookahead window's end)."""
    saved = canvas.valid, canvas.padded
    idx = torch.arange(canvas.length, device=end.device)
    canvas.valid = saved[0] & (idx[None, :] < end[:, None])
    canvas.padded = True
    try:
        yield
    finally:
        canvas.valid, canvas.padded = saved


def require_helper(model, strategy: str):
    """``model``'s autoregressive helper (``dllm.models.helper``), or an error saying how to load one."""
    helper = getattr(model, "helper", None)
    if helper is None:
        raise ValueError(f"strategy {strategy!r} needs an autoregressive helper of the model's tokenizer: "
                         "dllm.load(..., helper=PATH_OR_ID) (--helper on the command line)")
    return helper


def refuse_beside_helper(strategy: str, config, commits: str, drafts: str) -> None:
    """What a helper-verified strategy (apd, guided) cannot take, named with the fix: a stopper
    (it would commit outside what the helper verifies), classifier-free guidance (the helper has no
    unconditional branch) and an unmasking rule (the strategy drafts every masked position)."""
    if config.stopper != "none":
        raise ValueError(f"{strategy} commits {commits}; stopper {config.stopper!r} would commit outside it: "
                         "use stopper='none'")
    if config.cfg_scale > 0:
        raise ValueError(f"{strategy}'s helper has no unconditional branch for classifier-free guidance: "
                         "use cfg_scale=0")
    if config.policy != "low_confidence" or config.policy_args:
        raise ValueError(f"{strategy} drafts every masked position of {drafts} and commits {commits}; it applies "
                         f"no unmasking rule (got policy {config.policy!r} {config.policy_args or ''}): leave "
                         "policy at its default")


def helper_logits(helper, tokens: Tensor, valid: Tensor, positions: Tensor, start: int, stop: int) -> Tensor:
    """(B, stop - start, V_h) the helper's next-token logits for canvas positions [start, stop)
    (outputs start - 1 .. stop - 2) of ``tokens`` (B, >= stop): left padding masked out, each
    row at its own positions; ids the helper cannot embed (never read by kept outputs) zeroed."""
    ids = tokens[:, :stop]
    ids = torch.where(ids < helper.vocab_size, ids, torch.zeros_like(ids))
    out = helper.model(input_ids=ids, attention_mask=valid[:, :stop].long(), position_ids=positions[:, :stop],
                       use_cache=False)
    return out.logits[:, start - 1 : stop - 1]


def window_cache(state, kv_window: int) -> APDWindowCache:
    """The decode's K/V window cache, installed in place of ``cache='none'`` on the first round
    (APD refuses every other cache; a block-causal model's blocks would need whole-block K/V)."""
    if not isinstance(state.cache, APDWindowCache):
        state.cache = APDWindowCache(kv_window)
    return state.cache


@register_strategy("apd")
@dataclass(kw_only=True, slots=True)
class APD:
    mixture_weight: float = 0.7  # R: the diffusion model's weight in the mixture (1 - R: the helper's)
    max_lookahead: int | None = None  # M: the window's masks (None: the rest of the block)
    kv_window: int | None = None  # W: K/V recomputed from W - 1 before the last window start (None: all, exact)
    helper_cache: bool = False  # keep the helper's K/V of the committed prefix (transformers' cache)
    helper_prefix: tuple | None = field(default=None, init=False, repr=False)  # (decode state, its cache)
    candidate_rows = 1  # rows one canvas row occupies in a forward (dllm.engine.memory)

    def __post_init__(self) -> None:
        if not 0.0 <= self.mixture_weight <= 1.0:
            raise ValueError(f"mixture_weight (R) must be in [0, 1], got {self.mixture_weight}")
        if self.max_lookahead is not None and self.max_lookahead < 1:
            raise ValueError(f"max_lookahead (M) must be >= 1 or None (the whole block), got {self.max_lookahead}")
        if self.kv_window is not None and (isinstance(self.kv_window, bool) or not isinstance(self.kv_window, int)
                                           or self.kv_window < 1):
            raise ValueError(f"kv_window (W) must be an integer >= 1 or None (every K/V recomputed each round), "
                             f"got {self.kv_window!r}")
        if not isinstance(self.helper_cache, bool):
            raise ValueError(f"helper_cache must be True or False, got {self.helper_cache!r}")

    def check_config(self, config) -> None:
        """Refuse what APD's loop does not compose with, naming why."""
        refuse_beside_helper("apd", config, "the prefix its helper accepts", "its window")
        if config.cache != "none":
            raise ValueError(f"apd's window moves by its accepted count every round and the diffusion model sees the "
                             f"canvas up to the window's end; cache {config.cache!r} keeps K/V from block boundaries "
                             "of the whole canvas: use cache='none'")

    def check_model(self, model) -> None:
        """Refuse what ``model`` cannot run this way (no helper loaded; ``kv_window`` on a
        block-causal model), before any forward (``dllm.engine.model_fit``)."""
        if self.kv_window is not None and model.attention == "block_causal":
            raise ValueError("apd's kv_window recomputes K/V from inside a model block, which a block-causal model "
                             "reads whole: use kv_window=None")
        require_helper(model, "apd")

    def step(self, state) -> Tensor:
        """One round; returns the tokens each row committed (its base steps)."""
        self.check_config(state.config)
        self.check_model(state.model)
        helper = state.model.helper
        canvas, bs, be = state.canvas, state.bs, state.be
        eligible = state.eligible() & state.runner.active[:, None]  # (B, W) the row's masks left (a suffix)
        moving = eligible.any(-1)
        W = eligible.shape[1]
        j = torch.arange(W, device=eligible.device)
        curr = torch.where(moving, eligible.int().argmax(-1), W)  # (B,) the window's first position
        M = W if self.max_lookahead is None else self.max_lookahead
        window = eligible & (j[None, :] < curr[:, None] + M)  # (B, W) the lookahead window
        right = bs + torch.where(moving, (curr + window.sum(-1)), W)  # (B,) canvas end the model sees
        if self.kv_window is not None:
            window_cache(state, self.kv_window).start, state.cache.right, state.cache.moving = bs + curr, right, moving
        with keys_before(canvas, right):
            logits = state.block_logits()  # (B, W, V)
        stats = state.statistics(logits)
        draft = stats.token  # (B, W): the forward's token at each position (sampled at T > 0)
        tokens = state.tokens.clone()
        tokens[:, bs:be] = torch.where(window, draft, tokens[:, bs:be])
        stop = int(right.max())  # (a host read: the helper's forward length)
        if self.helper_cache:
            if self.helper_prefix is None or self.helper_prefix[0] is not state:
                self.helper_prefix = (state, HelperPrefixCache())
            verify = self.helper_prefix[1].logits(helper, tokens, canvas.valid, canvas.positions, bs, stop)
        else:
            verify = helper_logits(helper, tokens, canvas.valid, canvas.positions, bs, stop)  # (B, stop - bs, V_h)
        V = min(verify.shape[-1], logits.shape[-1])
        mixed = logits[:, : stop - bs, :V].double().clone()
        if state.mask_id < V:
            mixed[..., state.mask_id] = float("-inf")
        mixed = self.mixture_weight * mixed + (1 - self.mixture_weight) * verify[..., :V].double()
        # the mixture's choice: its argmax, a constrained row's among what keeps its canvas completable
        choice = verifier_choice(state, mixed, draft, window, curr, keep_first=True)
        agree = torch.zeros_like(window)
        agree[:, : stop - bs] = choice == draft[:, : stop - bs]
        # the window's first position always; later ones up to the first disagreement
        reject = window & ~agree & (j[None, :] > curr[:, None])
        first = torch.where(reject.any(-1), reject.int().argmax(-1), W)  # (B,)
        commit = window & (j[None, :] < first[:, None])
        state.commit(commit, draft)
        if self.helper_cache:
            self.helper_prefix[1].keep_committed(state.tokens, state.mask_id)
        return commit.sum(-1)
