"""Every registered unmasking rule with options under which it commits a varying number of
tokens on the random tiny models, and a model wrapper that makes one ragged row end early."""
from __future__ import annotations

import torch

from dllm.samplers import RULES
from dllm.samplers.rules.learn2pd import ConfidenceFilter

# Random tiny models are unsure (p ~ 0.09, entropy ~ 4.5 nats).
RULE_OPTIONS: dict[str, dict] = {
    "low_confidence": {}, "random": {}, "origin": {}, "maskgit_plus": {}, "topk_margin": {},
    "entropy": {}, "threshold": {"tau": 0.09}, "factor": {"factor": 3.75}, "eb_sampler": {"gamma": 4.4},
    "entropy_threshold": {"tau": 4.5}, "learn2pd": {"tau": 0.5}, "sequential": {},
}
# rule variants by name -> (rule, options): Dream's ranking rules drawing with alg_temp,
# and the options that reproduce LLaDA2.0's / SDAR's official loops (tests/models/test_official_loops.py)
VARIANTS = {"maskgit_plus_alg_temp": ("maskgit_plus", {"alg_temp": 0.5}),
            "low_confidence_block_tau": ("low_confidence", {"schedule": "block", "tau": 0.09}),
            "sequential_block": ("sequential", {"schedule": "block"}),
            "eb_sampler_sum": ("eb_sampler", {"bound": "sum", "gamma": 10.0})}
# the rules that draw random numbers of their own (besides the sampled tokens at T > 0)
DRAWING_RULES = ("random", "origin", "maskgit_plus_alg_temp")


def rule_config(name: str, filter_dir: str) -> dict:
    """policy / policy_args for ``name`` (a learn2pd rule reads the filter in ``filter_dir``)."""
    rule, options = VARIANTS.get(name, (name, RULE_OPTIONS.get(name)))
    options = dict(options)
    if rule == "learn2pd":
        options["filter"] = filter_dir
    return dict(policy=rule, policy_args=options)


def save_filter(path, width: int) -> str:
    torch.manual_seed(0)
    ConfidenceFilter(width).save(path)
    return str(path)


class EndsAt:
    """A model that predicts end-of-text at position id ``position`` with certainty, so the row
    whose answer starts there ends (and waits, finished) while the other rows decode."""

    def __init__(self, model, position: int = 2) -> None:
        self.inner, self.position = model, position

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, tokens, positions, visible=None, cache=None, cache_write=0, logits_for=None):
        logits = self.inner(tokens, positions, visible, cache, cache_write, logits_for)
        if logits_for is not None:  # the queries whose logits were computed
            positions = positions[:, logits_for[0] : logits_for[1]]
        bias = 30.0 * (positions == self.position)  # (N, T)
        return logits.index_add(-1, torch.tensor([self.eos_token_ids[0]], device=logits.device),
                                bias[..., None].to(logits.dtype))


assert set(RULE_OPTIONS) == set(RULES), "a new rule needs options here"
